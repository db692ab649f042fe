"""Memory placement: which kinds a container asks for (memory-type), how long it starts
cold (cold-start), and which pool's nodes hold its memory (widened up the tree until
its request fits).

    cri-resource-manager.intel.com/memory-type: dram,pmem    (dram, pmem, cxl, hbm; a list)
    cri-resource-manager.intel.com/cold-start: 30s           (seconds, or 500ms, 2m, 1h)

Without memory-type a container gets DRAM. cxl names the same nodes as pmem: the
hardware model cannot tell far memory apart (topology/memkind.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cri_resmgr.bounded import short
from cri_resmgr.policy.topology_aware.pooltree import KINDS, Pool

__all__ = ["AnnotationError", "parse_memory_type", "parse_duration", "memory_pool", "available_kinds", "DEFAULT_KINDS"]

DEFAULT_KINDS: tuple[str, ...] = ("dram",)
_ALIASES = {"dram": "dram", "pmem": "pmem", "cxl": "pmem", "hbm": "hbm"}
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}
_DURATION = re.compile(r"^\s*(\d{1,12}(?:\.\d{1,9})?)\s*(ms|s|m|h|)\s*$", re.ASCII)
MAX_DURATION = 7 * 24 * 3600.0  # a week: a cold start longer than that is a typo


class AnnotationError(ValueError):
    """A container annotation is malformed; the message names it."""


def parse_memory_type(value: str | None) -> tuple[str, ...]:
    """The kinds named by a memory-type annotation, in KINDS order; None: the default."""
    if value is None:
        return DEFAULT_KINDS
    kinds = set()
    for item in value.replace(" ", ",").split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item not in _ALIASES:
            raise AnnotationError(f"memory-type: unknown memory type {short(item)} (known: dram, pmem, cxl, hbm)")
        kinds.add(_ALIASES[item])
    if not kinds:
        raise AnnotationError(f"memory-type: no memory type in {short(value)}")
    return tuple(k for k in KINDS if k in kinds)


def parse_duration(value: str | None, what: str = "cold-start") -> float | None:
    """Seconds from '30', '30s', '500ms', '2m', '1h'; None when not given."""
    if value is None:
        return None
    m = _DURATION.match(value)
    if m is None:
        raise AnnotationError(f"{what}: expected a duration such as 30s, 500ms or 2m, got {short(value)}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise AnnotationError(f"{what}: the duration must be positive, got {short(value)}")
    if seconds > MAX_DURATION:
        raise AnnotationError(f"{what}: {short(value)} is longer than a week ({MAX_DURATION:g}s)")
    return seconds


def available_kinds(pool: Pool, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The requested kinds the pool has memory of."""
    return tuple(k for k in kinds if pool.memory.get(k))


def memory_pool(pool: Pool, kinds: tuple[str, ...], request: int, used: Mapping[str, int]) -> Pool:
    """The pool whose memory a container placed in `pool` gets: the pool itself when its
    free memory of those kinds holds the request, else the nearest ancestor where it does
    (the root at worst). `used`: bytes already given out, by pool name, over the subtree."""
    for candidate in pool.lineage():
        if available_kinds(candidate, kinds) and \
                candidate.memory_bytes(kinds) - used.get(candidate.name, 0) >= request:
            return candidate
    return pool.lineage()[-1]
