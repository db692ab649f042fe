"""A brute-force reference for the allocation rules of issue 10, for small machines.

It is slow on purpose and has no cleverness to get wrong: it tries every way
of taking n threads (as a count per core: which threads of one core are taken
does not matter to any rule) and keeps the ones with the best `rule_key`.
The allocator under test must reach the same key.

The rule key, smaller is better, in the issue's order:
  groups spanned at each containment level (node, die, L3, package): a request
  that fits in one node stays in one, and so on; several nodes: the fewest;
  then untouched cores split (never more than the request forces);
  then cores used (whole cores first).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["rule_key", "best_rule_key", "count_vectors", "fewest_nodes"]

CONTAINMENT = ("node", "die", "l3", "package")


def _group_of(topo: Topology, level: str) -> dict[int, int]:
    return {cpu: g for g, cpus in enumerate(topo.groups(level)) for cpu in cpus}  # type: ignore[arg-type]


def rule_key(topo: Topology, free: CPUSet, got: Iterable[int]) -> tuple[int, ...]:
    got = set(got)
    key = []
    for level in CONTAINMENT:
        of = _group_of(topo, level)
        key.append(len({of[c] for c in got}) if of else 0)
    broken = touched = 0
    for core in topo.cores():
        used = got & set(core)
        if used:
            touched += 1
            if core <= free and len(used) < len(core):
                broken += 1
    return (*key, broken, touched)


def count_vectors(topo: Topology, free: CPUSet, n: int) -> Iterator[CPUSet]:
    """Every way of taking n free threads, one representative per count-per-core vector."""
    cores = [sorted(core & free) for core in topo.cores() if core & free]
    for counts in itertools.product(*(range(len(c) + 1) for c in cores)):
        if sum(counts) == n:
            yield CPUSet(cpu for core, k in zip(cores, counts, strict=True) for cpu in core[:k])


def best_rule_key(topo: Topology, free: CPUSet, n: int) -> tuple[int, ...]:
    return min(rule_key(topo, free, s) for s in count_vectors(topo, free, n))


def fewest_nodes(topo: Topology, free: CPUSet, n: int) -> int:
    """How many NUMA nodes n CPUs need at least: the fullest nodes, counted."""
    total = 0
    for k, size in enumerate(sorted((len(free & cpus) for cpus in topo.groups("node")), reverse=True), 1):
        total += size
        if total >= n:
            return k
    raise ValueError("not enough free CPUs")
