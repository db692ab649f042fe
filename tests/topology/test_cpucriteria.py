"""Each allocation criterion on its own, and the options kubelet has."""

import pytest

from cri_resmgr.topology.cpuallocator import AlignmentError, AllocationError, CPUAllocator
from cri_resmgr.topology.cpucriteria import (
    CRITERIA,
    FreeState,
    Ranked,
    broken_cores,
    cores_touched,
    idle_groups_broken,
    lowest_ids,
    spans,
    tightness,
)
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.cpushape import Shape
from tests.topology.shapes import machine


def state_of(topo, free):
    return FreeState(Shape(topo), CPUSet(free).as_mask())


@pytest.fixture(scope="module")
def two_nodes():
    """2 packages x 3 cores x 2 threads: cores 0..2 = 0-1, 2-3, 4-5 (node 0), 3..5 = 6-11 (node 1)."""
    return machine(packages=2, cores=3)


def test_spans_counts_groups_of_a_level(two_nodes):
    state = state_of(two_nodes, "0-11")
    assert spans("node")(state, {0: 2, 1: 2}) == 1
    assert spans("node")(state, {0: 2, 3: 2}) == 2
    assert spans("l3")(state, {0: 2, 3: 2}) == 0  # no L3 data: no opinion


def test_broken_cores_counts_only_untouched_cores_left_half_used(two_nodes):
    state = state_of(two_nodes, "1-11")  # core 0 already half used
    assert broken_cores(state, {0: 1}) == 0
    assert broken_cores(state, {1: 1}) == 1
    assert broken_cores(state, {1: 2}) == 0


def test_cores_touched(two_nodes):
    assert cores_touched(state_of(two_nodes, "0-11"), {0: 2, 4: 1}) == 2


def test_idle_groups_broken_prefers_the_busy_node(two_nodes):
    state = state_of(two_nodes, "1-11")
    assert idle_groups_broken(state, {1: 2}) < idle_groups_broken(state, {4: 2})


def test_tightness_prefers_the_fuller_group(two_nodes):
    state = state_of(two_nodes, "2-11")
    assert tightness(state, {1: 2}) < tightness(state, {3: 2})


def test_lowest_ids_is_the_last_word(two_nodes):
    state = state_of(two_nodes, "0-11")
    assert lowest_ids(state, {0: 2}) < lowest_ids(state, {1: 2})
    assert CRITERIA[-1] is lowest_ids


def test_ranked_compares_criterion_by_criterion(two_nodes):
    state = state_of(two_nodes, "1-11")
    # Same node and cores touched; the leftover thread breaks no core.
    assert Ranked(state, {0: 1}) < Ranked(state, {1: 1})
    assert not Ranked(state, {1: 1}) < Ranked(state, {0: 1})


def test_full_pcpus_only_takes_whole_cores_and_refuses_odd_counts(two_nodes):
    alloc = CPUAllocator(two_nodes, full_pcpus_only=True)
    free = two_nodes.online - CPUSet("0")
    assert alloc.allocate(free, 2) == CPUSet("2-3")
    with pytest.raises(AlignmentError, match="multiple of 2"):
        alloc.allocate(free, 3)
    with pytest.raises(AllocationError):
        alloc.allocate(free, 12)  # 11 free, 10 of them in whole cores


def test_distribute_across_numa_splits_evenly():
    topo = machine(packages=2, cores=4)
    got = CPUAllocator(topo, distribute_across_numa=True).allocate(topo.online, 12)
    assert [len(got & topo.node_cpus(n)) for n in (0, 1)] == [6, 6]
    packed = CPUAllocator(topo).allocate(topo.online, 12)
    assert packed >= topo.node_cpus(0)
