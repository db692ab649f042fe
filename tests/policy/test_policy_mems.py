"""cpuset_mems on machines whose CPU nodes do not all have memory."""

from __future__ import annotations

from cri_resmgr.policy.pools import MemsOf, memory_nodes
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import CPUInfo, NumaNode, Topology


def _topology(nodes: list[NumaNode]) -> Topology:
    cpus = [CPUInfo(id=c, package=0, die=0, core=c, node=n.id, siblings=CPUSet({c}))
            for n in nodes for c in n.cpus]
    return Topology(cpus, nodes)


def _dist(me: int, table: dict[int, int]) -> dict[int, int]:
    return {me: 10, **table}


def test_a_cpu_node_without_memory_takes_the_nearest_node_with_memory() -> None:
    # POWER/ARM: node 2 has CPUs but no memory; node 0 is nearer to it than node 1.
    topo = _topology([
        NumaNode(0, CPUSet("0-1"), 1 << 20, _dist(0, {1: 20, 2: 15})),
        NumaNode(1, CPUSet("2-3"), 1 << 20, _dist(1, {0: 20, 2: 30})),
        NumaNode(2, CPUSet("4-5"), 0, _dist(2, {0: 15, 1: 30})),
    ])
    assert memory_nodes(topo) == {0: frozenset({0}), 1: frozenset({1}), 2: frozenset({0})}
    mems = MemsOf(topo)
    assert mems(CPUSet("4-5")) == "0"
    assert mems(CPUSet("2-5")) == "0-1"


def test_an_offline_node_is_never_in_cpuset_mems_and_ties_take_every_nearest() -> None:
    topo = _topology([
        NumaNode(0, CPUSet("0"), 1 << 20, _dist(0, {1: 20, 2: 20})),
        NumaNode(1, CPUSet("1"), 1 << 20, _dist(1, {0: 20, 2: 20})),
        NumaNode(2, CPUSet("2"), 0, {}, online=False),  # linked by its CPU, directory missing
    ])
    assert MemsOf(topo)(CPUSet("2")) == "0-1"


def test_memory_only_tiers_are_not_the_default_for_a_memoryless_cpu_node() -> None:
    topo = _topology([
        NumaNode(0, CPUSet("0"), 1 << 20, _dist(0, {1: 30, 2: 17})),
        NumaNode(1, CPUSet("1"), 0, _dist(1, {0: 30, 2: 17})),
        NumaNode(2, CPUSet(), 1 << 22, _dist(2, {0: 17, 1: 17})),  # PMEM, nearer to node 1
    ])
    assert MemsOf(topo)(CPUSet("1")) == "0"


def test_no_memory_information_at_all_keeps_each_node_its_own() -> None:
    topo = _topology([NumaNode(0, CPUSet("0"), 0), NumaNode(1, CPUSet("1"), 0)])
    assert MemsOf(topo)(CPUSet("0-1")) == "0-1"
