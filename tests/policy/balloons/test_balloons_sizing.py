"""Nearness.deflate (sizing.py) against its definition: one CPU at a time, the one with
the fewest balloon CPUs in its package, then node, die, L3 and core, the highest id of
those alike (the bucketed version must give back exactly these)."""

from __future__ import annotations

import random

import pytest

from cri_resmgr.policy.balloons.sizing import COMPACT_LEVELS, Nearness
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine


def defined(topology: Topology, cpus: CPUSet, m: int, whole_cores: bool) -> CPUSet:
    """The definition, written the slow and obvious way."""
    group_of = {level: {c: g for g in topology.groups(level) for c in g} for level in COMPACT_LEVELS}
    def key(c: int, remaining: set[int]) -> tuple[int, ...]:
        counts = [0 if (g := group_of[level].get(c)) is None else len(g.as_frozenset() & remaining)
                  for level in COMPACT_LEVELS]
        return (*counts, -c)

    remaining = set(cpus)
    gone: set[int] = set()
    for _ in range(m):
        if not remaining:
            break
        victim = min(remaining, key=lambda c: key(c, remaining))  # noqa: B023 (used at once)
        core = group_of["core"].get(victim)
        out = (core.as_frozenset() & remaining) if whole_cores and core is not None else {victim}
        remaining -= out
        gone |= out
    return CPUSet(gone)


SHAPES = {
    "2x4x2": lambda: machine(packages=2, cores=4, threads=2),
    "snc-l3": lambda: machine(packages=2, dies=2, cores=6, threads=2, nodes_per_package=2, l3_cores=3),
    "interleaved": lambda: machine(packages=2, cores=8, threads=2, interleaved=True),
    "no-smt-sparse": lambda: machine(packages=2, cores=6, threads=1, stride=3),
    "hybrid": lambda: machine(cores=4, e_cores=8),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("whole_cores", [False, True])
def test_deflate_gives_back_what_the_definition_says(shape, whole_cores):
    topology = SHAPES[shape]()
    near = Nearness(topology)
    online = sorted(topology.online)
    rng = random.Random(f"{shape}-{whole_cores}")
    for _ in range(60):
        cpus = CPUSet(rng.sample(online, rng.randint(1, len(online))))
        m = rng.randint(0, len(cpus) + 1)
        assert near.deflate(cpus, m, whole_cores) == defined(topology, cpus, m, whole_cores), (cpus, m)


# -- a dedicated balloon's growth: whole cores (Nearness.inflate_whole) ------------------------


def test_a_dedicated_balloon_completes_its_own_core_first():
    near = Nearness(machine(packages=2, cores=4, threads=2), CPUSet("0"))
    # 2-4 held; 4's sibling 5 free, and core 6-7: it takes 5.
    assert near.inflate_whole(CPUSet("5-15"), CPUSet("2-4"), 1) == (CPUSet("5"), CPUSet())


def test_a_dedicated_balloon_gives_a_stray_thread_up_for_a_whole_core():
    near = Nearness(machine(packages=2, cores=4, threads=2), CPUSet("0"))
    # 2-4 held; 5 is another balloon's: one more CPU as a thread of core 6-7 would leave
    # two cores split; whole core 6-7 for the stray 4 leaves none (one CPU moved).
    assert near.inflate_whole(CPUSet("6-15"), CPUSet("2-4"), 1) == (CPUSet("6-7"), CPUSet("4"))
    # Not across nodes, nor onto the reserved CPU's sibling: no whole core there, no answer.
    assert near.inflate_whole(CPUSet("1,8-15"), CPUSet("2-4"), 1) is None
