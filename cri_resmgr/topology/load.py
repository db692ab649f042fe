"""A Topology back from the JSON of `cri-resmgr topology -o json` (render.to_document).

So that a machine one has no access to can be described by what its operator
printed there, and simulated elsewhere. Every problem raises TopologyError naming
the field, e.g. "cpus[3].siblings: ...".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from .cpuset import CPUSet
from .model import UNKNOWN, CacheInfo, CoreKind, CPUInfo, MemoryKind, NumaNode, Topology, TopologyError

__all__ = ["from_document", "loads"]

_CORE_KINDS = ("performance", "efficiency")
_MEMORY_KINDS = ("dram", "pmem-cxl", "hbm")


def loads(text: str, source: str = "topology JSON") -> Topology:
    """Parses `cri-resmgr topology -o json` output; errors start with `source`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TopologyError(f"{source}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    try:
        return from_document(doc)
    except TopologyError as e:
        raise TopologyError(f"{source}: {e}") from None


def from_document(doc: Any) -> Topology:
    if not isinstance(doc, Mapping):
        raise TopologyError("expected a JSON object as printed by `cri-resmgr topology -o json`")
    for key in ("cpus", "nodes"):
        if key not in doc:
            raise TopologyError(f"missing {key!r}: not the output of `cri-resmgr topology -o json`")
    cpus = [_cpu(c, f"cpus[{i}]") for i, c in enumerate(_list(doc, "cpus", "the document"))]
    nodes = [_node(n, f"nodes[{i}]") for i, n in enumerate(_list(doc, "nodes", "the document"))]
    caches = [_cache(c, f"caches[{i}]") for i, c in enumerate(_list(doc, "caches", "the document", []))]
    warnings = [str(w) for w in _list(doc, "warnings", "the document", [])]
    return Topology(cpus, nodes, offline=_cpuset(doc, "offline", "the document"),
                    isolated=_cpuset(doc, "isolated", "the document"),
                    present=_cpuset(doc, "present", "the document"),
                    nohz_full=_cpuset(doc, "nohz_full", "the document"), caches=caches, warnings=warnings)


def _cpu(d: Any, where: str) -> CPUInfo:
    _object(d, where)
    kind = _optional_str(d, "kind", where)
    if kind is not None and kind not in _CORE_KINDS:
        raise TopologyError(f"{where}.kind: {kind!r} is not one of {', '.join(_CORE_KINDS)}")
    return CPUInfo(
        id=_int(d, "id", where), package=_id_or_unknown(d, "package", where), die=_id_or_unknown(d, "die", where),
        core=_id_or_unknown(d, "core_id", where), node=_int(d, "node", where),
        siblings=_cpuset(d, "siblings", where, required=True),
        cluster=_optional_int(d, "cluster", where), l2=_optional_int(d, "l2", where),
        l3=_optional_int(d, "l3", where), kind=cast(CoreKind | None, kind),
        capacity=_optional_int(d, "capacity", where), base_khz=_optional_int(d, "base_khz", where),
        max_khz=_optional_int(d, "max_khz", where))


def _node(d: Any, where: str) -> NumaNode:
    _object(d, where)
    kind = _optional_str(d, "kind", where)
    if kind is not None and kind not in _MEMORY_KINDS:
        raise TopologyError(f"{where}.kind: {kind!r} is not one of {', '.join(_MEMORY_KINDS)}")
    raw = d.get("distances") or {}
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{where}.distances: expected an object of node id -> distance")
    distances: dict[int, int] = {}
    for k, v in raw.items():
        if not str(k).isdigit() or not isinstance(v, int) or isinstance(v, bool):
            raise TopologyError(f"{where}.distances: bad entry {k!r}: {v!r}")
        distances[int(k)] = v
    online = d.get("online", True)
    if not isinstance(online, bool):
        raise TopologyError(f"{where}.online: expected true or false, got {online!r}")
    return NumaNode(id=_int(d, "id", where), cpus=_cpuset(d, "cpus", where), memory_kb=_int(d, "memory_kb", where),
                    distances=distances, kind=cast(MemoryKind | None, kind), online=online,
                    memory_side_cache_kb=_optional_int(d, "memory_side_cache_kb", where))


def _cache(d: Any, where: str) -> CacheInfo:
    _object(d, where)
    return CacheInfo(level=_int(d, "level", where), id=_int(d, "id", where),
                     cpus=_cpuset(d, "cpus", where, required=True), size_kb=_optional_int(d, "size_kb", where))


def _object(d: Any, where: str) -> None:
    if not isinstance(d, Mapping):
        raise TopologyError(f"{where}: expected an object, got {type(d).__name__}")


def _list(d: Mapping[str, Any], key: str, where: str, default: list[Any] | None = None) -> list[Any]:
    value = d.get(key, default)
    if not isinstance(value, list):
        raise TopologyError(f"{key}: expected a list in {where}, got {type(value).__name__}")
    return value


def _int(d: Mapping[str, Any], key: str, where: str) -> int:
    value = d.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TopologyError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
    return value


def _optional_int(d: Mapping[str, Any], key: str, where: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, where)


def _id_or_unknown(d: Mapping[str, Any], key: str, where: str) -> int:
    """Package, die and core ids: null where the kernel gave none."""
    return UNKNOWN if d.get(key) is None else _int(d, key, where)


def _optional_str(d: Mapping[str, Any], key: str, where: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise TopologyError(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _cpuset(d: Mapping[str, Any], key: str, where: str, required: bool = False) -> CPUSet:
    value = d.get(key)
    if value is None and not required:
        return CPUSet()
    if not isinstance(value, str):
        raise TopologyError(f"{where}.{key}: expected a CPU list such as '0-3,8', got {value!r}")
    try:
        return CPUSet.parse(value)
    except ValueError as e:
        raise TopologyError(f"{where}.{key}: {e}") from None
