"""The three faults issue 10 found in the old allocator, one test each.

Each failed on the allocator before the rewrite (commit a4024cb) and states
the rule it breaks.
"""

from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine


def test_whole_node_request_gets_one_node_when_a_node_holds_several_packages():
    # 4 packages x 2 cores x 2 threads; node 0 = packages 0 and 2, node 1 = packages 1 and 3
    # (POWER-like, package ids need not follow nodes). The old allocator nested
    # nodes under packages, lost the node level and took packages 0 and 1 by id:
    # half of each node.
    topo = machine(packages=4, cores=2, node_of_package=lambda p: p % 2)
    got = CPUAllocator(topo).allocate(topo.online, 8)
    assert topo.nodes_of(got) in ((0,), (1,))
    assert got in (topo.node_cpus(0), topo.node_cpus(1))


def test_small_request_uses_leftover_threads_before_breaking_a_core():
    # SMT-4 (POWER): cores 0-3, 4-7, 8-11, 12-15. Cores 0 and 1 have one free
    # thread each (3 and 7). The old _best_fit broke the untouched core 8-11.
    topo = machine(cores=4, threads=4)
    free = topo.online - CPUSet("0-2,4-6")
    got = CPUAllocator(topo).allocate(free, 2)
    assert got == CPUSet("3,7")


def test_spill_into_a_second_package_takes_whole_cores_not_a_stray_thread():
    # 2 packages x 3 cores x 2 threads (0-5 | 6-11). Package 0: cpu 0 used, so
    # 1 is a stray thread and 2-5 two whole cores; package 1: 6-7 used, 8-11 free.
    # 6 CPUs fit in neither package. The old spill took package 0 whole (the
    # stray 1 included) and split core 8-9 for the last CPU; three whole cores
    # were free.
    topo = machine(packages=2, cores=3)
    free = topo.online - CPUSet("0,6-7")
    got = CPUAllocator(topo).allocate(free, 6)
    assert 1 not in got
    assert all(topo.siblings(c) <= got for c in got), got
    assert got in (CPUSet("2-5,8-9"), CPUSet("2-3,8-11"))
