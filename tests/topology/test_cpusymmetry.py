"""Idle twins (cpusymmetry.py): the allocator tries one of the idle groups built alike,
and still picks exactly what trying every group picks."""

import random

import pytest

from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import CPUInfo, NumaNode, Topology, cpuplacer
from cri_resmgr.topology.cpuallocator import AllocationError, CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.cpushape import Shape
from tests.topology.shapes import SHAPES

MACHINES = {**{name: make for name, make in SHAPES.items()},
            "2s/4n/32c/2t": lambda: topology_of("2s/4n/32c/2t"),
            "8s/16n/64c/2t/sparse": lambda: topology_of("8s/16n/64c/2t/sparse"),
            "2s/8n/48c/2t/l3=4": lambda: topology_of("2s/8n/48c/2t/l3=4")}


def _try_every_group(monkeypatch):
    """The walk as without cpusymmetry.py: pruning and mapping apply to the built-in
    criteria only (the same criteria in another tuple are tried group by group)."""
    monkeypatch.setattr(cpuplacer, "CRITERIA", tuple(list(cpuplacer.CRITERIA)))  # (a copy)


def _frees(topo: Topology, rng: random.Random, count: int):
    """Free sets as a policy makes them: whole nodes idle, some nodes partly used."""
    nodes = [topo.node_cpus(n) for n in topo.node_ids() if topo.node_cpus(n)]
    for _ in range(count):
        free = CPUSet()
        for cpus in nodes:
            r = rng.random()
            if r < 0.5:
                free |= cpus  # idle
            elif r < 0.8:
                free |= CPUSet(c for c in cpus if rng.random() < 0.6)
        yield free


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_trying_one_twin_picks_what_trying_every_group_picks(name, monkeypatch):
    topo = MACHINES[name]()
    rng = random.Random(name)
    cases = [(free, rng.choice([1, 2, 3, 4, 6, 8, max(1, len(free) // 5)]), opts)
             for free in _frees(topo, rng, 60) if free
             for opts in [{}, {"distribute_across_numa": True}]]
    def run():
        out = []
        for free, n, opts in cases:
            try:
                out.append(CPUAllocator(topo, **opts).allocate(free, n))
            except AllocationError as e:
                out.append(str(e))
        return out
    pruned = run()
    _try_every_group(monkeypatch)
    assert run() == pruned


def test_an_idle_machine_tries_one_node_not_sixteen(monkeypatch):
    topo = topology_of("8s/16n/64c/2t/sparse")
    calls = []
    real = cpuplacer.pick_cores
    monkeypatch.setattr(cpuplacer, "pick_cores", lambda state, cores, n: calls.append(len(cores)) or real(state, cores, n))
    alloc = CPUAllocator(topo)
    assert alloc.allocate(topo.online, 2) == topo.cpu(topo.online.min()).siblings
    assert len(calls) == 1
    calls.clear()
    _try_every_group(monkeypatch)
    alloc.allocate(topo.online, 2)
    assert len(calls) == 16


def test_a_partly_used_node_is_tried_beside_one_idle_twin(monkeypatch):
    topo = topology_of("8s/16n/64c/2t/sparse")
    node0 = topo.node_cpus(0)
    free = topo.online - CPUSet([node0.min()])  # node 0 partly used: the allocator packs there
    calls = []
    real = cpuplacer.pick_cores
    monkeypatch.setattr(cpuplacer, "pick_cores", lambda state, cores, n: calls.append(1) or real(state, cores, n))
    got = CPUAllocator(topo).allocate(free, 1)
    assert got == topo.cpu(node0.min()).siblings - CPUSet([node0.min()])  # the stray thread
    # node 0, and node 1 (idle, in node 0's busier package); the idle nodes of the idle
    # packages are node 1's twins: its pick moved to their cores, not worked out again
    assert len(calls) == 2
    calls.clear()
    _try_every_group(monkeypatch)
    assert CPUAllocator(topo).allocate(free, 1) == got
    assert len(calls) == 16


def _two_node_machine(node_of_core: list[int]) -> Topology:
    cpus = []
    for core, node in enumerate(node_of_core):
        ids = (2 * core, 2 * core + 1)
        for cpu in ids:
            cpus.append(CPUInfo(id=cpu, package=0, die=0, core=core, node=node, siblings=CPUSet(ids)))
    nodes = [NumaNode(n, CPUSet(c.id for c in cpus if c.node == n), 1 << 20) for n in (0, 1)]
    return Topology(cpus, nodes)


def test_twins_need_each_core_of_the_first_below_the_others():
    # cores 0,2 | 1,3: position by position node 0's are lower: twins
    assert len({t.cls for t in Shape(_two_node_machine([0, 1, 0, 1])).twins("node")}) == 1
    # cores 0,3 | 1,2: node 0 wins on its first core but not its second: each on its own
    odd = _two_node_machine([0, 1, 1, 0])
    assert len({t.cls for t in Shape(odd).twins("node")}) == 2
    # and the allocator still picks as it would trying both
    assert CPUAllocator(odd).allocate(odd.online, 2) == CPUSet("0-1")
