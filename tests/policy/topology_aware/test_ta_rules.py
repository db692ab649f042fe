"""The policy's own rules on small machines where they are tight (issue 36): what it reports
free for exclusive use is what it could give, an exclusive container's memory is on its
CPUs' nodes."""

from __future__ import annotations

from ta_testkit import make, wl

from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology.cpuset import CPUSet


def test_exclusive_free_leaves_out_what_the_leaves_keep_for_their_shared_containers():
    # 3 nodes of one 2-thread core each; a BestEffort container in node0 and node1: each
    # node keeps one of its CPUs for it, so 4 CPUs can still be exclusive, not 5.
    policy = make(topology_of("1s/3n/3c/2t"))
    policy.allocate(wl("a"))
    policy.allocate(wl("b"))
    assert {policy.assignment(k).pool for k in "ab"} == {"node0", "node1"}
    free = policy.usage().exclusive_free
    assert len(free) == 4
    # Each free CPU is one a container could get: all of them at once, for 4 CPUs.
    got = policy.allocate(wl("g", "Guaranteed", 4000)).resources.cpuset_cpus
    assert policy.assignment("g").exclusive == got == free
    assert not policy.usage().exclusive_free


def test_exclusive_free_is_the_spare_of_the_root_with_nothing_kept():
    policy = make(topology_of("1s/3n/3c/2t"))
    # Nothing placed: the root keeps one shared CPU for newcomers.
    assert policy.usage().exclusive_free == CPUSet(range(5))


def test_an_exclusive_container_over_two_nodes_of_three_gets_their_memory_only():
    # The 1s/3n/3c/2t churn's case: node0 and node1 keep a CPU each for their BestEffort
    # containers, node2 has one CPU left: a 2-CPU container gets a thread of node0 and
    # one of node1 (the root's spare), and the memory of those two nodes, not node2's.
    topo = topology_of("1s/3n/3c/2t")
    policy = make(topo)
    policy.allocate(wl("a"))
    policy.allocate(wl("b"))
    policy.allocate(wl("one", "Guaranteed", 1000))
    assert policy.assignment("one").exclusive <= topo.node_cpus(2)
    res = policy.allocate(wl("g", "Guaranteed", 2000, memory_request=1 << 28, memory_limit=1 << 28)).resources
    assert policy.assignment("g").pool == "root"
    assert {topo.node_of(c) for c in res.cpuset_cpus} == {0, 1}
    assert res.cpuset_mems == "0-1"


def test_an_exclusive_container_over_two_nodes_whose_memory_is_short_gets_the_pools():
    # Its memory request does not fit those two nodes: the pool's nodes, all three.
    topo = topology_of("1s/3n/3c/2t/mem=1g")
    policy = make(topo)
    policy.allocate(wl("a"))
    policy.allocate(wl("b"))
    policy.allocate(wl("one", "Guaranteed", 1000))
    res = policy.allocate(wl("g", "Guaranteed", 2000, memory_request=5 << 29, memory_limit=5 << 29)).resources
    assert {topo.node_of(c) for c in res.cpuset_cpus} == {0, 1}
    assert res.cpuset_mems == "0-2"
