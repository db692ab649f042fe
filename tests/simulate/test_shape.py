"""-shape: the grammar, the machines it builds, and the errors for bad strings."""

from __future__ import annotations

import pytest

from cri_resmgr.simulate.shape import ShapeError, parse_shape, topology_of
from cri_resmgr.topology.cpuset import CPUSet


def test_lscpu_counts_build_the_operators_node():
    t = topology_of("2s/4n/64c/2t")
    assert len(t.online) == 256 and t.package_ids() == (0, 1) and t.cpu_node_ids() == (0, 1, 2, 3)
    assert len(t.cores()) == 128 and t.threads_per_core() == 2
    assert t.node_package_ids(1) == (0,) and t.node_package_ids(2) == (1,)
    assert t.siblings(0) == CPUSet([0, 1])  # linear: siblings adjacent
    assert t.distance(0, 1) == 11 and t.distance(0, 2) == 21
    assert t.groups("l3") == (t.package_cpus(0), t.package_cpus(1))  # one L3 per die by default


def test_sparse_4096_cpus_16_nodes():
    t = topology_of("8s/16n/256c/2t/sparse")
    assert len(t.online) == 4096 and len(t.cpu_node_ids()) == 16
    assert t.cpu_node_ids() == tuple(range(0, 32, 2))
    assert t.package_cpus(1).min() == 1024 and t.online.max() == 7 * 1024 + 511
    assert not t.offline  # holes are not offline CPUs: they do not exist


def test_interleaved_ids_dies_l3_and_memory_tiers():
    t = topology_of("2s/2d/8c/2t/interleaved/l3=2/mem=32g/2pmem:512g/1hbm")
    assert t.siblings(0) == CPUSet([0, 16]) and t.package_of(8) == 1
    assert len(t.die_ids(0)) == 2 and len(t.groups("l3")) == 8
    assert t.nodes[0].memory_kb == 32 << 20
    assert [t.nodes[n].kind for n in t.memory_only_node_ids()] == ["pmem-cxl", "pmem-cxl", "hbm"]
    assert t.nodes[2].memory_kb == 512 << 20
    pmem_of_socket_1 = 3
    assert t.closest_memory_only_nodes(0) == (4,)  # socket 0's HBM is nearer than its PMEM
    assert t.closest_memory_only_nodes(1) == (pmem_of_socket_1,)
    assert t.distance(1, pmem_of_socket_1) == 17 and t.distance(0, pmem_of_socket_1) == 28


def test_defaults_one_socket_one_thread():
    s = parse_shape("4c")
    assert (s.sockets, s.cpu_nodes, s.threads) == (1, 1, 1)
    assert len(topology_of("4c").online) == 4


@pytest.mark.parametrize("text, says", [
    ("", "empty part"),
    ("2s//4c", "empty part"),
    ("2s/4n", "no core count"),
    ("3n/2s/4c", "3 NUMA nodes do not divide among 2 sockets"),
    ("2s/2n/4c/2x", "unknown part '2x'"),
    ("4c/4c", "repeats the cores count"),
    ("0c", "at least 1"),
    ("6c/4n", "6 cores per socket do not divide among 4 NUMA nodes"),
    ("8c/l3=3", "l3=3 does not divide"),
    ("4c/mem=0g", "bad size '0g'"),
    ("4c/9t", "at most 8"),
    ("4c/2pmem:lots", "bad size 'lots'"),
    ("1024s/64c/2t", "131072 CPUs"),
])
def test_bad_shapes_name_the_string_and_the_part(text, says):
    with pytest.raises(ShapeError) as e:
        topology_of(text)
    assert f"shape {text!r}" in str(e.value) and says in str(e.value)
