"""Memory placement: which kinds a container asks for (memory-type), how long it starts
cold (cold-start), and which pool's nodes hold its memory (widened up the tree until
its request fits).

    cri-resource-manager.intel.com/memory-type: dram,pmem    (dram, pmem, cxl, hbm, mixed; a list)
    cri-resource-manager.intel.com/cold-start: 30s           (seconds, or 500ms, 2m, 1h, 1m30s,
                                                              or `duration: 30s` as CRI-RM)

Without memory-type a container gets DRAM. cxl names the same nodes as pmem: the
hardware model cannot tell far memory apart (topology/memkind.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import yaml

from cri_resmgr.bounded import InputError, load_yaml, short
from cri_resmgr.policy.topology_aware.pooltree import KINDS, Pool

__all__ = ["AnnotationError", "parse_memory_type", "parse_duration", "memory_pool", "available_kinds", "DEFAULT_KINDS"]

DEFAULT_KINDS: tuple[str, ...] = ("dram",)
_ALIASES = {"dram": "dram", "pmem": "pmem", "cxl": "pmem", "hbm": "hbm"}
_ALL = ("dram", "pmem", "hbm")  # "mixed", nri-plugins' name for every kind
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}
# ASCII digits, a dozen at most: "١s" and 400 digits (an infinite cold start) are no durations.
_BARE = re.compile(r"^\d{1,12}(?:\.\d{1,9})?$", re.ASCII)  # seconds
_PART = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(ms|s|m|h)", re.ASCII)
_COMPOUND = re.compile(r"^(?:\d{1,12}(?:\.\d{1,9})?(?:ms|s|m|h)){1,8}$", re.ASCII)  # Go's time.ParseDuration
MAX_DURATION = 7 * 24 * 3600.0  # a week: a cold start longer than that is a typo


class AnnotationError(ValueError):
    """A container annotation is malformed; the message names it."""


def parse_memory_type(value: str | None) -> tuple[str, ...]:
    """The kinds named by a memory-type annotation, in KINDS order; None: the default."""
    if value is None:
        return DEFAULT_KINDS
    kinds: set[str] = set()
    for item in value.replace(" ", ",").split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item == "mixed":
            kinds.update(_ALL)
            continue
        if item not in _ALIASES:
            raise AnnotationError(f"memory-type: unknown memory type {short(item)} "
                                  "(known: dram, pmem, cxl, hbm, mixed)")
        kinds.add(_ALIASES[item])
    if not kinds:
        raise AnnotationError(f"memory-type: no memory type in {short(value)}")
    return tuple(k for k in KINDS if k in kinds)


def parse_duration(value: str | None, what: str = "cold-start") -> float | None:
    """Seconds from '30', '30s', '500ms', '2m', '1h', Go's compound '1m30s', or CRI Resource
    Manager's form, a YAML mapping `duration: 10s`; None when not given."""
    if value is None:
        return None
    text = value.strip()
    if ":" in text:
        text = _duration_field(text, what, value)
    text = text.replace(" ", "")
    if _BARE.match(text):
        seconds = float(text)
    elif _COMPOUND.match(text):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))
    else:
        raise AnnotationError(f"{what}: expected a duration such as 30s, 500ms, 1m30s or 'duration: 10s', "
                              f"got {_shown(value)}")
    if seconds <= 0:
        raise AnnotationError(f"{what}: the duration must be positive, got {_shown(value)}")
    if seconds > MAX_DURATION:
        raise AnnotationError(f"{what}: {_shown(value)} is longer than a week ({MAX_DURATION:g}s)")
    return seconds


def _duration_field(text: str, what: str, value: str) -> str:
    try:
        data = load_yaml(text, what, max_depth=4, max_nodes=100)
    except (InputError, yaml.YAMLError):
        data = None
    if not isinstance(data, dict):
        raise AnnotationError(f"{what}: expected a duration or 'duration: 10s', got {_shown(value)}")
    fields = {str(k).lower(): v for k, v in data.items()}
    if set(fields) != {"duration"}:
        raise AnnotationError(f"{what}: expected only the field duration, got {short(list(data))}")
    duration = fields["duration"]
    if isinstance(duration, bool) or not isinstance(duration, str | int | float):
        raise AnnotationError(f"{what}.duration: expected a duration such as 10s, got {short(duration)}")
    return str(duration).strip()


def _shown(value: str, limit: int = 60) -> str:
    return short(value, limit)


def available_kinds(pool: Pool, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The requested kinds the pool has memory of."""
    return pool.kinds_held(kinds)


def memory_pool(pool: Pool, kinds: tuple[str, ...], request: int, used: Mapping[str, int],
                limit: int | None = 0) -> Pool:
    """The pool whose memory a container placed in `pool` gets: the pool itself when its
    free memory of those kinds holds the request (and its memory the `limit`, a Burstable
    container's; None: unlimited, the root's), else the nearest ancestor where it does
    (the root at worst). `used`: bytes already given out, by pool name, over the subtree."""
    if limit is None:
        return pool.lineage()[-1]
    for candidate in pool.lineage():
        if available_kinds(candidate, kinds) and \
                candidate.memory_bytes(kinds) - used.get(candidate.name, 0) >= request and \
                candidate.memory_bytes(kinds) >= limit:
            return candidate
    return pool.lineage()[-1]
