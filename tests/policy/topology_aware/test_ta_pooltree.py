"""The pool tree on every machine class: nesting, collapsing, memory attachment."""

from __future__ import annotations

import pytest
from ta_testkit import make, wl

from cri_resmgr.policy.topology_aware.pooltree import attach_memory_only, build_tree, kind_of
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology
from tests.topology.shapes import SHAPES


def _check_tree(tree, available):
    root = tree.root
    assert root.cpus == available and root.parent is None
    assert len({p.name for p in tree.pools}) == len(tree.pools), "pool names must be unique"
    leaves = CPUSet().union(*(leaf.cpus for leaf in tree.leaves))
    assert leaves == available and sum(len(leaf.cpus) for leaf in tree.leaves) == len(available)
    for pool in tree.pools:
        if pool.children:
            assert CPUSet().union(*(c.cpus for c in pool.children)) == pool.cpus
            assert len(pool.children) > 1, f"{pool.name}: a single child must be collapsed"
        for child in pool.children:
            assert child.parent is pool and child.depth == pool.depth + 1
            assert child.nodes(("dram",)) <= pool.nodes(("dram",))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_tree_on_every_machine_class(shape):
    topology = SHAPES[shape]()
    tree = build_tree(topology, topology.online, CPUSet())
    _check_tree(tree, topology.online)
    policy = make(topology)
    d = policy.allocate(wl("g", "Guaranteed", 1000))
    assert len(d.resources.cpuset_cpus) == 1


def test_one_socket_one_node_is_one_root_pool():
    topology = fake_topology(sockets=1, cores_per_die=1, threads_per_core=2)
    tree = build_tree(topology, topology.online, CPUSet())
    assert [p.name for p in tree.pools] == ["root"]


def test_levels_and_names_two_sockets_two_nodes():
    topology = fake_topology(sockets=2, cores_per_die=4, numa_per_socket=2)
    tree = build_tree(topology, topology.online, CPUSet([0]))
    assert [(p.name, p.level, p.depth) for p in tree.pools] == [
        ("root", "root", 0), ("package0", "package", 1), ("node0", "node", 2), ("node1", "node", 2),
        ("package1", "package", 1), ("node2", "node", 2), ("node3", "node", 2)]
    assert tree["node0"].sharable == tree["node0"].cpus and tree["node0"].reserved == CPUSet([0])
    assert tree["node0"].memory == {"dram": frozenset({0})}


def test_l3_groups_are_leaves_and_dies_are_levels():
    tree = build_tree(SHAPES["l3-per-ccx"](), SHAPES["l3-per-ccx"]().online, CPUSet())
    assert [p.level for p in tree.pools] == ["root", "die", "l3", "l3", "die", "l3", "l3"]


def test_node_spanning_packages_gets_unique_names():
    topology = SHAPES["node-spans-packages"]()
    tree = build_tree(topology, topology.online, CPUSet())
    assert [p.name for p in tree.pools] == ["root", "package0", "package1"]


def test_memory_only_nodes_attach_to_the_closest_cpu_node():
    topology = fake_topology(sockets=2, cores_per_die=2, numa_per_socket=2, memory_only_nodes=2)
    # Memory-only node 4 hangs off socket 0 (nodes 0, 1), node 5 off socket 1 (nodes 2, 3).
    assert attach_memory_only(topology) == {0: (4,), 1: (), 2: (5,), 3: ()}
    tree = build_tree(topology, topology.online, CPUSet())
    assert tree["node0"].memory == {"dram": frozenset({0}), "pmem": frozenset({4})}
    assert tree["package1"].nodes(("dram", "pmem")) == {2, 3, 5}
    assert tree["root"].capacity["pmem"] == 2 * tree["node0"].capacity["pmem"]
    assert tree["node1"].nodes(("pmem",)) == frozenset()


def test_kind_names():
    assert (kind_of("dram"), kind_of(None), kind_of("pmem-cxl"), kind_of("hbm")) == ("dram", "dram", "pmem", "hbm")


def test_available_resources_limit_the_tree():
    topology = fake_topology(sockets=2, cores_per_die=4, numa_per_socket=2)
    available = CPUSet.parse("0-7")  # socket 0 only (linear numbering)
    tree = build_tree(topology, available, CPUSet())
    _check_tree(tree, available)
    assert [p.name for p in tree.pools] == ["root", "node0", "node1"]


def test_isolated_cpus_are_not_sharable():
    topology = fake_topology(sockets=1, cores_per_die=4, isolated=[6, 7])
    tree = build_tree(topology, topology.online, CPUSet([0]))
    assert tree.root.isolated == CPUSet([6, 7]) and tree.root.sharable == CPUSet.parse("0-5")


def test_4096_cpus_32_nodes_8_sockets_with_memory_tiers():
    topology = fake_topology(sockets=8, cores_per_die=256, threads_per_core=2, numa_per_socket=4,
                             numbering="interleaved", memory_only_nodes=8)
    assert len(topology.online) == 4096 and len(topology.cpu_node_ids()) == 32
    policy = make(topology, reserved=4)
    _check_tree(policy.tree, topology.online)
    assert len(policy.tree.leaves) == 32 and len(policy.tree.pools) == 41
    assert all(p.memory.get("pmem") for p in policy.tree.pools if p.level == "package")
    d = policy.allocate(wl("big", "Guaranteed", 64000))
    assert len(d.resources.cpuset_cpus) == 64
    nodes = {topology.node_of(c) for c in d.resources.cpuset_cpus}
    assert len(nodes) == 1, "64 CPUs fit one 128-CPU node"
