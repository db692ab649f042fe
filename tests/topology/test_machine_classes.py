"""Discovery on generated trees of each machine class of issue 10.

Each test names what discovery did before: refused to start ("siblings ...
differ", "invalid CPU list", distance rows), or built a wrong model (all CPUs
in node 0, nodes nested in packages, an orphan CPU adopted by node 0).
"""

import shutil
import tempfile
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import LEVELS, UNKNOWN, Topology
from tests.harness import sysfs_classes as classes
from tests.harness.sysfs_classes import CLASSES, Machine, write_machine

SHM = Path("/dev/shm")


def _read(tmp_path: Path, m: Machine) -> Topology:
    write_machine(tmp_path, m)
    return discover(tmp_path)


def _agrees(topo: Topology, m: Machine) -> None:
    """The model is the generated machine: online CPUs, cores, nodes."""
    assert topo.online == m.online()
    cores: dict[int, set[int]] = {}
    for c in m.cpus:
        if c.online:
            cores.setdefault(c.core, set()).add(c.id)
    assert set(topo.cores()) == {CPUSet(v) for v in cores.values()}
    for c in m.cpus:
        if c.online:
            assert topo.node_of(c.id) == c.node, c


@pytest.mark.parametrize("name", [n for n in CLASSES if n != "sparse_4096"])
def test_every_class_discovers_and_its_levels_partition_the_cpus(tmp_path, name):
    m = CLASSES[name]()
    topo = _read(tmp_path, m)
    _agrees(topo, m)
    for level in LEVELS:
        groups = topo.groups(level)
        if groups:
            assert sorted(c for g in groups for c in g) == list(topo.online), level
            assert [g.min() for g in groups] == sorted(g.min() for g in groups)


def test_old_kernel_amd_cores_come_from_sibling_lists(tmp_path):
    # Before: "siblings 0,64 differ from the CPUs of core package=0 die=0 core_id=0".
    topo = _read(tmp_path, classes.old_kernel_amd())
    assert len(topo.cores()) == 64 and topo.siblings(9) == CPUSet("9,73")
    assert topo.cpu(9).core == topo.cpu(1).core == 1  # core ids repeat across dies
    assert topo.groups("die") == () and topo.cpu(0).die == UNKNOWN  # no die_id: not guessed
    assert len(topo.groups("node")) == 8 and len(topo.groups("l3")) == 16
    assert topo.groups("l3")[0] == CPUSet("0-3,64-67")
    assert topo.package_node_ids(1) == (4, 5, 6, 7) and topo.node_package_ids(5) == (1,)
    assert topo.distance(0, 3) == 16 and topo.distance(0, 4) == 32
    assert topo.warnings == ()


def test_nul_terminated_files(tmp_path):
    # Before: "invalid CPU list '0-15\\n\\x00'".
    topo = _read(tmp_path, classes.nul_terminated())
    assert topo.online == CPUSet("0-15") and topo.nohz_full == CPUSet()
    assert topo.groups("l3") == (CPUSet("0-7"), CPUSet("8-15"))
    assert topo.nodes[1].memory_kb > 0 and topo.distance(0, 1) == 21 and topo.warnings == ()


def test_cpumap_only_nodes(tmp_path):
    # Before: no cpulist and no node links, so every CPU was adopted by node 0.
    topo = _read(tmp_path, classes.cpumap_only())
    for nid in range(4):
        assert topo.node_cpus(nid) == CPUSet(range(nid, 80, 4))
    assert topo.siblings(3) == CPUSet("3,43") and topo.distance(0, 2) == 11


def test_nodes_holding_several_packages(tmp_path):
    topo = _read(tmp_path, classes.multi_package_nodes())
    assert topo.groups("node") == (CPUSet("0-15"), CPUSet("16-31"))
    assert len(topo.groups("package")) == 4
    assert topo.node_package_ids(0) == (0, 1) and topo.package_node_ids(3) == (1,)


def test_power_with_unknown_package(tmp_path):
    topo = _read(tmp_path, classes.power_unknown_package())
    assert topo.groups("package") == () and topo.package_ids() == (UNKNOWN,)
    assert topo.groups("node") == (CPUSet("0-31"), CPUSet("32-63"))
    assert topo.node_ids() == (0, 8) and topo.distance(0, 8) == 40
    assert topo.threads_per_core() == 8


def test_missing_offline_file_uses_per_cpu_flags(tmp_path):
    topo = _read(tmp_path, classes.missing_offline_file())
    assert topo.offline == CPUSet("5,9-10") and topo.present == CPUSet("0-15")
    assert topo.siblings(4) == CPUSet("4")


def test_odd_distance_rows_and_an_offline_node(tmp_path):
    # Before: "4 distances for 3 nodes" refused to start; node3's CPUs went to node 0.
    topo = _read(tmp_path, classes.odd_distances())
    text = "\n".join(topo.warnings)
    assert "node/node1/distance: 4 distances for 3 online nodes" in text
    assert "node/node2/distance: not a list of distances" in text
    assert "node/node3: missing, but CPUs 12-15 link to it" in text
    assert topo.node_cpus(3) == CPUSet("12-15") and not topo.nodes[3].online
    assert topo.node_cpus(0) == CPUSet("0-3")
    assert topo.distance(1, 0) == 20 and topo.distance(0, 1) == 21  # defaults for the odd row only


def test_l3_per_ccx(tmp_path):
    topo = _read(tmp_path, classes.l3_per_ccx())
    assert len(topo.groups("node")) == 1 and len(topo.groups("l3")) == 8
    assert topo.groups("l3")[1] == CPUSet("4-7,36-39")
    l3 = [c for c in topo.caches if c.level == 3]
    assert len(l3) == 8 and l3[0].size_kb == 32768
    assert topo.cpu(37).l3 == 4 and topo.cpu(37).l2 == 5


def test_cache_groups_from_shared_cpu_map(tmp_path):
    # Issue 24 fault 10. Before: no L2 and no L3 group when shared_cpu_list is missing.
    topo = _read(tmp_path, classes.cache_map_only())
    assert len(topo.groups("l3")) == 8 and topo.groups("l3")[1] == CPUSet("4-7,36-39")
    assert len(topo.groups("l2")) == 32 and topo.cpu(37).l2 == 5
    assert topo.warnings == ()


def test_hmat_figures_in_access1_only(tmp_path):
    # Issue 24 fault 11. Before: access0's zero latency meant "no HMAT", so the HBM nodes at
    # distance 14 fell to the distance convention and were called far memory (PMEM/CXL).
    topo = _read(tmp_path, classes.hbm_access1())
    assert {n: topo.nodes[n].kind for n in topo.node_ids()} == {0: "dram", 1: "dram", 2: "hbm", 3: "hbm"}


def test_arm_clusters(tmp_path):
    topo = _read(tmp_path, classes.arm_clusters())
    assert len(topo.groups("cluster")) == 12 and topo.groups("cluster")[0] == CPUSet("0-3")
    assert topo.groups("l3") == ()  # no L3 described: absent
    assert all(c.kind is None and c.capacity == 1024 for c in topo.cpus.values())


def test_hybrid_p_and_e_cores(tmp_path):
    topo = _read(tmp_path, classes.hybrid())
    assert {c for c, i in topo.cpus.items() if i.kind == "performance"} == set(range(16))
    assert {c for c, i in topo.cpus.items() if i.kind == "efficiency"} == set(range(16, 24))
    assert topo.groups("cluster")[-2:] == (CPUSet("16-19"), CPUSet("20-23"))
    assert (topo.cpu(1).base_khz, topo.cpu(1).max_khz) == (3200000, 5000000)
    assert (topo.cpu(20).base_khz, topo.cpu(20).max_khz) == (2400000, 3800000)


def test_big_little_from_cpu_capacity(tmp_path):
    topo = _read(tmp_path, classes.big_little())
    assert [topo.cpu(c).kind for c in (0, 4)] == ["efficiency", "performance"]
    assert topo.cpu(0).capacity == 446


def test_memory_tiers(tmp_path):
    topo = _read(tmp_path, classes.memory_tiers())
    assert topo.memory_only_node_ids() == (2, 3, 4, 5)
    kinds = {n: topo.nodes[n].kind for n in topo.node_ids()}
    # 2: distance 17 only; 3: HMAT slower; 4: HMAT faster; 5: behind a memory-side cache.
    assert kinds == {0: "dram", 1: "dram", 2: "pmem-cxl", 3: "pmem-cxl", 4: "hbm", 5: "pmem-cxl"}
    assert topo.nodes[5].memory_side_cache_kb == 4096
    assert topo.closest_memory_only_nodes(0) == (4,)


def test_4096_sparse_cpus_are_discovered(tmp_path):
    # How long discovery takes is make bench's (section allocator), not a test's to assert.
    # tmpfs when there is one: writing 50k files on a slow disk takes tens of seconds.
    root = tmp_path
    if SHM.is_dir() and SHM.stat().st_mode & 0o002:
        root = Path(tempfile.mkdtemp(dir=SHM))
    try:
        m = write_machine(root, classes.sparse_4096())
        topo = discover(root)
    finally:
        if root != tmp_path:
            shutil.rmtree(root)
    _agrees(topo, m)
    assert len(topo.online) == 4096 and topo.online.max() == 7679
    assert topo.node_ids() == tuple(range(0, 16, 2))
    assert len(topo.groups("l3")) == 256 and len(topo.groups("core")) == 2048
