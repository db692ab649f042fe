import random

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuallocator import AllocationError, CPUAllocator, allocate
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology, generate


@pytest.fixture(scope="module")
def two_by_four():
    """2 sockets x 4 cores x 2 threads, siblings adjacent: socket 0 = 0-7, core 0 = 0-1."""
    return CPUAllocator(fake_topology(sockets=2, cores_per_die=4, threads_per_core=2))


@pytest.fixture(scope="module")
def kubelet_dual_socket_ht():
    """kubelet's topoDualSocketHT: socket 0 = 0,2,4,6,8,10, sibling of N is N+6."""
    return CPUAllocator(
        fake_topology(sockets=2, cores_per_die=3, threads_per_core=2, numbering="interleaved")
    )


@pytest.fixture(scope="module")
def snc():
    """2 sockets x 8 cores x 2 threads, 2 NUMA nodes per socket, Xeon numbering:
    node = cpu % 4 for first threads, socket = node % 2, sibling of N is N+16."""
    return CPUAllocator(
        fake_topology(sockets=2, cores_per_die=8, threads_per_core=2, numa_per_socket=2,
                      numbering="interleaved")
    )


def take(alloc, free, n, prefer=None):
    got = alloc.allocate(CPUSet(free), n, None if prefer is None else CPUSet(prefer))
    assert len(got) == n and got.issubset(CPUSet(free))
    return got


def all_but(alloc, used):
    return alloc.topology.online - CPUSet(used)


# -- kubelet static CPU manager behaviour ----------------------------------------------


@pytest.mark.parametrize(
    "used, n, expected",
    [
        ("", 2, "0-1"),  # two CPUs: one whole core
        ("", 8, "0-7"),  # a socket's worth: the whole socket
        ("0", 8, "8-15"),  # ...the idle one
        ("", 1, "0"),
        ("0", 1, "1"),  # the sibling of a half-used core, not a fresh core
        ("0", 2, "2-3"),  # a whole core, in the socket already in use
        ("0", 3, "1-3"),  # a whole core plus the lone sibling
        ("0,8", 1, "1"),
        ("0-5", 2, "6-7"),  # the last core of the busy socket, not 8-9
        ("0-4", 2, "6-7"),  # a whole idle core beats two half cores
        ("0-4", 1, "5"),
        ("0-4", 3, "5-7"),
        ("", 10, "0-9"),  # a socket plus a core of the other
        ("", 16, "0-15"),
        ("8-9", 4, "10-13"),  # fits in busy socket 1 rather than idle socket 0
    ],
)
def test_two_sockets_linear_siblings(two_by_four, used, n, expected):
    assert take(two_by_four, all_but(two_by_four, CPUSet(used)), n) == CPUSet(expected)


@pytest.mark.parametrize(
    "free, n, expected",
    [
        ("0-11", 6, "0,2,4,6,8,10"),  # a whole socket
        ("1-5,7-11", 1, "2"),  # socket 0 is in use: pack there
        ("1-5,7-11", 2, "2,8"),  # a whole core on socket 0
        ("1-11", 1, "6"),  # sibling of the used cpu 0
        ("1-11", 6, "1,3,5,7,9,11"),  # the idle socket
        ("0-11", 12, "0-11"),
    ],
)
def test_kubelet_dual_socket_ht_cases(kubelet_dual_socket_ht, free, n, expected):
    assert take(kubelet_dual_socket_ht, free, n) == CPUSet(expected)


def test_smt_off_takes_sockets_then_single_cpus():
    alloc = CPUAllocator(fake_topology(sockets=4, cores_per_die=6, threads_per_core=1))
    online = alloc.topology.online
    assert take(alloc, online, 6) == CPUSet("0-5")
    assert take(alloc, online, 7) == CPUSet("0-6")
    assert take(alloc, online - CPUSet("0-5"), 13) == CPUSet("6-18")
    assert take(alloc, online - CPUSet("6"), 1) == CPUSet("7")  # pack into socket 1


# -- NUMA awareness -----------------------------------------------------------------------


def test_node_sized_request_gets_a_whole_node(snc):
    topo = snc.topology
    assert take(snc, topo.online, 8) == topo.node_cpus(0)
    # With node 0 partly used, the busier socket 0 still hosts it, in node 2.
    assert take(snc, topo.online - CPUSet("0"), 8) == topo.node_cpus(2)


def test_small_request_stays_in_one_node_and_takes_whole_cores(snc):
    topo = snc.topology
    got = take(snc, topo.online, 4)
    assert got == CPUSet("0,4,16,20")
    assert topo.nodes_of(got) == (0,)
    assert all(topo.siblings(c).issubset(got) for c in got)


def test_rest_of_a_used_node_is_preferred(snc):
    topo = snc.topology
    free = topo.online - CPUSet("0,16")
    assert take(snc, free, 6) == topo.node_cpus(0) - CPUSet("0,16")


def test_fewest_nodes_beats_tightest_socket(snc):
    topo = snc.topology
    # socket 0: node 0 and node 2 have 3 free each (6 in all);
    # socket 1: node 1 fully free (8), node 3 fully used.
    free = (
        CPUSet(list(topo.node_cpus(0))[:3]) | CPUSet(list(topo.node_cpus(2))[:3])
        | topo.node_cpus(1)
    )
    got = take(snc, free, 5)
    assert topo.nodes_of(got) == (1,)


def test_request_larger_than_a_node_spans_one_socket(snc):
    topo = snc.topology
    got = take(snc, topo.online, 10)
    assert {topo.package_of(c) for c in got} == {0}
    assert topo.nodes_of(got) == (0, 2)
    assert got.issuperset(topo.node_cpus(0))


def test_request_larger_than_a_socket(snc):
    topo = snc.topology
    got = take(snc, topo.online, 20)
    assert got.issuperset(topo.package_cpus(0))
    assert topo.nodes_of(got - topo.package_cpus(0)) == (1,)


def test_spill_over_takes_the_fewest_nodes(snc):
    topo = snc.topology
    # Nodes 0 and 2 (socket 0) have 3 free each, node 1 has 5: 9 CPUs need three
    # nodes whatever is chosen. (The old allocator took socket 0's free CPUs
    # whole; that is one of several placements with the fewest nodes.)
    free = (
        CPUSet(list(topo.node_cpus(0))[:3]) | CPUSet(list(topo.node_cpus(2))[:3])
        | CPUSet(list(topo.node_cpus(1))[:5])
    )
    got = take(snc, free, 9)
    assert len(topo.nodes_of(got)) == 3
    # Two of the three nodes are used up entirely, the third gives the rest.
    used_up = [nid for nid in topo.nodes_of(got) if free & topo.node_cpus(nid) <= got]
    assert len(used_up) == 2


def test_isolated_and_offline_cpus_are_never_invented():
    topo = fake_topology(sockets=1, cores_per_die=4, threads_per_core=2, offline="3", isolated="6-7")
    alloc = CPUAllocator(topo)
    free = topo.online - topo.isolated
    assert take(alloc, free, 5) == CPUSet("0-2,4-5")
    with pytest.raises(ValueError, match="not online: 3"):
        alloc.allocate(CPUSet("0-3"), 1)


# -- prefer -------------------------------------------------------------------------------------


def test_prefer_is_used_when_it_fits(snc):
    topo = snc.topology
    got = take(snc, topo.online, 4, prefer=topo.node_cpus(3))
    assert topo.nodes_of(got) == (3,)
    assert got == CPUSet("3,7,19,23")


def test_prefer_too_small_is_taken_whole_and_topped_up(two_by_four):
    got = take(two_by_four, all_but(two_by_four, "9-15"), 3, prefer="8-15")
    assert got == CPUSet("8,0-1")


# -- errors and API ---------------------------------------------------------------------------


def test_not_enough_cpus_raises_allocation_error_with_numbers(two_by_four):
    with pytest.raises(AllocationError) as err:
        two_by_four.allocate(CPUSet("0-2"), 4)
    assert (err.value.requested, err.value.available) == (4, 3)
    assert "4" in str(err.value) and "only 3 free (0-2)" in str(err.value)
    with pytest.raises(AllocationError, match="only 0 free"):
        two_by_four.allocate(CPUSet(), 1)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", None])
def test_bad_count_is_rejected(two_by_four, bad):
    with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
        two_by_four.allocate(CPUSet("0-3"), bad)


def test_zero_cpus_is_an_empty_allocation(two_by_four):
    assert two_by_four.allocate(CPUSet("0-3"), 0) == CPUSet()


def test_unknown_cpus_in_free_set_are_rejected(two_by_four):
    with pytest.raises(ValueError, match="not online: 16,99"):
        two_by_four.allocate(CPUSet("0-3,16,99"), 1)


def test_release(two_by_four):
    free = CPUSet("4-15")
    got = two_by_four.allocate(free, 2)
    assert two_by_four.release(free - got, got) == free
    with pytest.raises(ValueError, match="already free: 4"):
        two_by_four.release(free, CPUSet("0,4"))
    with pytest.raises(ValueError, match="not online: 40"):
        two_by_four.release(free, CPUSet("40"))


def test_module_level_allocate_matches_the_class(two_by_four):
    topo = two_by_four.topology
    assert allocate(topo, topo.online - CPUSet("0"), 1) == CPUSet("1")


def test_allocator_works_on_a_discovered_tree(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=4, threads_per_core=2, offline="15", isolated="14")
    topo = discover(tmp_path)
    alloc = CPUAllocator(topo)
    free = topo.online - topo.isolated
    # Socket 1 has only 8-13 usable (15 offline, 14 isolated).
    assert take(alloc, free, 6) == CPUSet("8-13")
    assert take(alloc, free, 7) == CPUSet("0-6")
    assert take(alloc, free, 1) == CPUSet("8")  # the busier socket


# -- properties on the benchmark-sized machine ------------------------------------------------------


def _churn(alloc, seed, steps):
    """Random allocate/release sequence; yields (free, n, result)."""
    rnd = random.Random(seed)
    free = alloc.topology.online
    held = []
    for _ in range(steps):
        if held and (rnd.random() < 0.35 or len(free) < 40):
            free = alloc.release(free, held.pop(rnd.randrange(len(held))))
        n = rnd.choice([1, 1, 2, 2, 3, 4, 6, 8, 16, 64])
        if n > len(free):
            continue
        got = alloc.allocate(free, n)
        yield free, n, got
        free = free - got
        held.append(got)


def test_random_churn_on_512_cpus_keeps_invariants():
    topo = fake_topology(sockets=2, cores_per_die=128, threads_per_core=2, numa_per_socket=4,
                         numbering="interleaved")
    alloc = CPUAllocator(topo)
    twin = CPUAllocator(topo)
    for free, n, got in _churn(alloc, seed=7, steps=400):
        assert len(got) == n and got.issubset(free)
        # Deterministic: a separately built allocator decides the same.
        assert twin.allocate(CPUSet(reversed(list(free))), n) == got
        node_free = [len(free & topo.node_cpus(nid)) for nid in topo.cpu_node_ids()]
        if max(node_free) >= n:
            assert len(topo.nodes_of(got)) == 1, (free, n, got)
        pkg_free = [len(free & topo.package_cpus(p)) for p in topo.package_ids()]
        if max(pkg_free) >= n:
            assert len({topo.package_of(c) for c in got}) == 1, (free, n, got)
        # An even request with an idle core available never splits a core.
        if n == 2 and any(core.issubset(free) for core in topo.cores()):
            assert len(topo.nodes_of(got)) == 1 and topo.siblings(got.min()) == got


def test_eight_socket_machine_prefers_whole_sockets():
    topo = fake_topology(sockets=8, cores_per_die=32, threads_per_core=2)
    alloc = CPUAllocator(topo)
    got = take(alloc, topo.online - CPUSet("0"), 128)
    assert got == topo.package_cpus(1) | topo.package_cpus(2)
