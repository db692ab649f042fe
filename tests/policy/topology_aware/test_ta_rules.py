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
