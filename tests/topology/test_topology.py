import shutil
import subprocess
from pathlib import Path

import pytest

from cri_resmgr.topology import CPUInfo, NumaNode, Topology, TopologyError, discover
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import LEVELS, UNKNOWN
from tests.harness.sysfs import fake_topology, generate, layout

SYS = Path("sys/devices/system")

# Real-machine sysfs dumps kept beside the repository, never inside it.
REPO = Path(__file__).resolve().parents[2]
# Beside the main checkout (/work/main) or a worktree (/work/wt/NAME).
FIXTURES = next((p for p in (REPO.parent / "shared" / "fixtures" / "sysfs",
                             REPO.parent.parent / "shared" / "fixtures" / "sysfs") if p.is_dir()),
                REPO.parent / "shared" / "fixtures" / "sysfs")
# Only the files discovery reads: the full archives hold ~80k files and take
# tens of seconds to write out.
_WANTED = [
    f"sysfs/*/{SYS}/cpu/{name}" for name in (
        "online", "offline", "present", "isolated", "nohz_full", "cpu*/online", "cpu*/topology/*_id",
        "cpu*/topology/thread_siblings_list",
        "cpu*/cache/index*/level", "cpu*/cache/index*/type", "cpu*/cache/index*/shared_cpu_list",
        "cpu*/cache/index*/size", "cpufreq/policy*/related_cpus", "cpufreq/policy*/base_frequency",
        "cpufreq/policy*/cpuinfo_max_freq",
    )
] + [f"sysfs/*/{SYS}/node/{name}" for name in ("online", "node*/cpulist", "node*/cpumap", "node*/distance",
                                                "node*/meminfo")]


def _unpack(archive: str, tmp_path_factory) -> Path:
    path = FIXTURES / archive
    if not path.is_file():
        pytest.skip(f"real-machine sysfs dumps not available at {FIXTURES}")
    if shutil.which("tar") is None:
        pytest.skip("tar is needed to unpack the real-machine sysfs dumps")
    dest = tmp_path_factory.mktemp(archive.split(".")[0])
    subprocess.run(
        ["tar", "-xjf", str(path), "-C", str(dest), "-m", "--no-same-owner",
         "--no-same-permissions", "--wildcards", "--no-wildcards-match-slash", *_WANTED],
        check=True,
    )
    return dest / "sysfs"


@pytest.fixture(scope="session")
def xeon_4numa_dump(tmp_path_factory) -> Path:
    return _unpack("xeon-2socket-4numa-80cpu.tar.bz2", tmp_path_factory)


@pytest.fixture(scope="session")
def multi_dump(tmp_path_factory) -> Path:
    return _unpack("xeon-desktop-server-4socket.tar.bz2", tmp_path_factory)


# -- generated machines ----------------------------------------------------------------

SHAPES = [
    # sockets, dies, cores/die, threads, numa/socket, numbering.  Kept small:
    # creating sysfs files is slow on some disks; real-sized machines are
    # covered by the real dumps and by fake_topology.
    (1, 1, 4, 1, 1, "linear"),
    (1, 1, 4, 2, 1, "linear"),
    (1, 1, 10, 2, 1, "interleaved"),
    (2, 1, 4, 2, 1, "linear"),
    (2, 1, 8, 2, 2, "linear"),
    (2, 1, 10, 2, 2, "interleaved"),
    (2, 2, 6, 2, 2, "linear"),
    (2, 2, 6, 2, 4, "interleaved"),
    (4, 1, 6, 2, 1, "interleaved"),
    (4, 1, 6, 1, 1, "linear"),
    (8, 1, 4, 2, 1, "linear"),
    (8, 1, 2, 2, 1, "interleaved"),
]


@pytest.mark.parametrize("sockets, dies, cores, threads, numa, numbering", SHAPES)
def test_discovery_matches_generated_shape(tmp_path, sockets, dies, cores, threads, numa, numbering):
    shape = generate(
        tmp_path, sockets=sockets, dies_per_socket=dies, cores_per_die=cores,
        threads_per_core=threads, numa_per_socket=numa, numbering=numbering,
    )
    topo = discover(tmp_path)
    ncpus = sockets * dies * cores * threads

    assert topo.online == CPUSet(range(ncpus))
    assert topo.offline == CPUSet() and topo.isolated == CPUSet()
    assert topo.package_ids() == tuple(range(sockets))
    assert topo.threads_per_core() == threads
    assert len(topo.cores()) == sockets * dies * cores
    assert topo.node_ids() == tuple(range(sockets * numa))
    assert topo.memory_only_node_ids() == ()
    for s in range(sockets):
        assert topo.package_cpus(s) == shape.cpus_where(socket=s)
        assert topo.die_ids(s) == tuple(range(dies))
        for d in range(dies):
            assert topo.die_cpus(s, d) == shape.cpus_where(socket=s, die=d)
        assert topo.package_node_ids(s) == tuple(n for n in shape.cpu_nodes if shape.node_socket[n] == s)
    for place in shape.places:
        info = topo.cpu(place.cpu)
        assert (info.package, info.die, info.core, info.node) == (place.socket, place.die, place.core_id, place.node)
        assert topo.siblings(place.cpu) == shape.cpus_where(socket=place.socket, core_index=place.core_index)
        assert len(topo.siblings(place.cpu)) == threads
    for nid in shape.cpu_nodes:
        assert topo.node_cpus(nid) == shape.cpus_where(node=nid)
        assert len(topo.node_cpus(nid)) == ncpus // (sockets * numa)
        assert topo.nodes[nid].memory_kb == 16 * 1024 * 1024


def test_interleaved_numbering_is_like_real_xeons(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=20, threads_per_core=2, numa_per_socket=2, numbering="interleaved")
    topo = discover(tmp_path)
    for cpu in range(40):
        assert topo.siblings(cpu) == CPUSet([cpu, cpu + 40])
        # Consecutive ids round-robin over the four nodes, two per socket.
        assert topo.node_of(cpu) == cpu % 4
        assert topo.package_of(cpu) == cpu % 2
    # Core ids restart per package and skip values, as Xeons report them.
    core_ids = sorted({topo.cpu(c).core for c in topo.package_cpus(0)})
    assert core_ids == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20, 24, 25, 26, 27, 28]
    assert topo.core_cpus(0, 8) != topo.core_cpus(1, 8)
    assert topo.distance(0, 2) == 11 and topo.distance(0, 1) == 21
    assert topo.nodes_by_distance(1) == (1, 3, 0, 2)


def test_linear_numbering_has_adjacent_siblings(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=4, threads_per_core=2)
    topo = discover(tmp_path)
    assert topo.siblings(0) == CPUSet("0-1") and topo.siblings(7) == CPUSet("6-7")
    assert topo.package_cpus(1) == CPUSet("8-15")
    assert topo.core_cpus(1, 0) == CPUSet("8-9")
    assert topo.cores()[:2] == (CPUSet("0-1"), CPUSet("2-3"))


def test_offline_and_isolated_cpus(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=4, threads_per_core=2, offline=CPUSet("3,12-13"), isolated="6-7")
    topo = discover(tmp_path)
    assert topo.offline == CPUSet("3,12-13")
    assert topo.online == CPUSet("0-2,4-11,14-15")
    assert topo.isolated == CPUSet("6-7")
    assert topo.siblings(2) == CPUSet("2")  # its sibling 3 is offline
    assert topo.package_cpus(1) == CPUSet("8-11,14-15")
    assert topo.node_cpus(1) == CPUSet("8-11,14-15")
    assert len(topo.cores()) == 7  # core 12-13 is gone entirely
    with pytest.raises(KeyError, match="CPU 3"):
        topo.cpu(3)


def test_isolated_cpus_that_are_offline_are_dropped(tmp_path):
    generate(tmp_path, cores_per_die=2, threads_per_core=2, offline=[3], isolated=[2, 3])
    assert discover(tmp_path).isolated == CPUSet("2")


def test_memory_only_nodes(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=4, threads_per_core=2, numa_per_socket=2,
             memory_only_nodes=2, mem_per_node_kb=1000, memory_only_kb=5000)
    topo = discover(tmp_path)
    assert topo.node_ids() == (0, 1, 2, 3, 4, 5)
    assert topo.cpu_node_ids() == (0, 1, 2, 3)
    assert topo.memory_only_node_ids() == (4, 5)
    assert topo.nodes[4].memory_only and topo.nodes[4].cpus == CPUSet()
    assert [topo.nodes[n].memory_kb for n in topo.node_ids()] == [1000] * 4 + [5000] * 2
    # Node 4 hangs off socket 0 (nodes 0, 1), node 5 off socket 1 (nodes 2, 3).
    assert topo.closest_memory_only_nodes(1) == (4,)
    assert topo.closest_memory_only_nodes(2) == (5,)
    assert topo.nodes_by_distance(4) == (4, 0, 1, 2, 3, 5)
    assert topo.distance(0, 4) == 17 and topo.distance(0, 5) == 28


def test_missing_die_id_means_dies_unknown(tmp_path):
    generate(tmp_path, sockets=2, dies_per_socket=2, cores_per_die=2, threads_per_core=2)
    for path in (tmp_path / SYS / "cpu").glob("cpu*/topology/die_id"):
        path.unlink()
    topo = discover(tmp_path)
    assert topo.die_ids(0) == (UNKNOWN,) and topo.die_cpus(0, UNKNOWN) == topo.package_cpus(0)
    assert topo.groups("die") == ()  # absent, not guessed
    assert len(topo.cores()) == 8


def test_missing_thread_siblings_are_derived_from_core_ids(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=3, threads_per_core=2, numbering="interleaved")
    expected = discover(tmp_path).cores()
    for path in (tmp_path / SYS / "cpu").glob("cpu*/topology/thread_siblings_list"):
        path.unlink()
    assert discover(tmp_path).cores() == expected


def test_missing_cpu_online_file_uses_per_cpu_flags(tmp_path):
    generate(tmp_path, cores_per_die=4, threads_per_core=1, offline=[2])
    (tmp_path / SYS / "cpu" / "online").unlink()
    assert discover(tmp_path).online == CPUSet("0-1,3")


def test_no_numa_directory_means_one_node_with_all_cpus(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=2, threads_per_core=2, numa_per_socket=2)
    shutil.rmtree(tmp_path / SYS / "node")
    topo = discover(tmp_path)
    assert topo.node_ids() == (0,)
    assert topo.node_cpus(0) == topo.online == CPUSet("0-7")
    assert topo.nodes_by_distance(0) == (0,)
    assert topo.distance(0, 0) == 10


def test_missing_distance_and_meminfo_use_defaults(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=2, threads_per_core=1)
    (tmp_path / SYS / "node" / "node0" / "distance").unlink()
    (tmp_path / SYS / "node" / "node0" / "meminfo").unlink()
    topo = discover(tmp_path)
    assert topo.distance(0, 1) == 20 and topo.distance(0, 0) == 10
    assert topo.nodes[0].memory_kb == 0
    assert topo.distance(1, 0) == 21  # node1's own file still read


def test_cpu_missing_from_every_node_is_adopted_via_its_node_link(tmp_path):
    generate(tmp_path, sockets=2, cores_per_die=2, threads_per_core=1)
    (tmp_path / SYS / "node" / "node1" / "cpulist").write_text("2\n")
    topo = discover(tmp_path)
    assert topo.node_of(3) == 1 and topo.node_cpus(1) == CPUSet("2-3")


def test_missing_host_root_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "no-such-root"
    with pytest.raises(TopologyError, match=str(missing)):
        discover(missing)


def test_passing_the_sys_directory_itself_gets_a_hint(tmp_path):
    generate(tmp_path, cores_per_die=1, threads_per_core=1)
    with pytest.raises(TopologyError, match="pass the directory above it"):
        discover(tmp_path / "sys")


def test_missing_cpu_directory_is_an_error_naming_it(tmp_path):
    (tmp_path / SYS / "node").mkdir(parents=True)
    with pytest.raises(TopologyError, match=str(tmp_path / SYS / "cpu")):
        discover(tmp_path)


@pytest.mark.parametrize(
    "relpath, garbage, check",
    [
        ("cpu/online", "zero-three", lambda t: t.online == CPUSet("0-7")),
        ("cpu/cpu2/topology/core_id", "two", lambda t: t.siblings(3) == CPUSet("2-3")),
        ("cpu/cpu0/topology/thread_siblings_list", "0,,1", lambda t: t.siblings(0) == CPUSet("0-1")),
        ("node/node0/distance", "10 x", lambda t: t.distance(0, 1) == 20 and t.distance(1, 0) == 21),
        ("node/node0/distance", "10", lambda t: t.distance(0, 1) == 20),
        ("node/node1/cpulist", "0,4-7", lambda t: t.node_cpus(0) == CPUSet("0-3")),
        ("cpu/cpu2/cache/index3/size", "lots", lambda t: True),
    ],
)
def test_garbage_in_a_file_is_a_warning_naming_the_file(tmp_path, relpath, garbage, check):
    generate(tmp_path, sockets=2, cores_per_die=2, threads_per_core=2)
    (tmp_path / SYS / relpath).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / SYS / relpath).write_text(garbage + "\n")
    if relpath.endswith("size"):
        (tmp_path / SYS / relpath).with_name("level").write_text("3\n")
        (tmp_path / SYS / relpath).with_name("shared_cpu_list").write_text("0-3\n")
    topo = discover(tmp_path)
    assert any(str(tmp_path / SYS / relpath) in w for w in topo.warnings), topo.warnings
    assert check(topo)


def test_generator_rejects_impossible_shapes(tmp_path):
    with pytest.raises(ValueError, match="cannot be split evenly"):
        generate(tmp_path, cores_per_die=3, numa_per_socket=2)
    with pytest.raises(ValueError, match="numbering"):
        generate(tmp_path, numbering="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sockets"):
        generate(tmp_path, sockets=0)
    with pytest.raises(ValueError, match="offline CPUs 99"):
        generate(tmp_path, offline=[99])
    with pytest.raises(ValueError, match="CPU 0"):
        generate(tmp_path, offline=[0])


# -- building a Topology directly --------------------------------------------------------


def _cpu(cpu, package=0, core=None, node=0, siblings=None):
    return CPUInfo(cpu, package, 0, cpu if core is None else core, node, CPUSet(siblings or [cpu]))


def test_sparse_ids_are_fine():
    topo = Topology(
        [_cpu(3, core=7, node=5, siblings=[3, 40]), _cpu(40, core=7, node=5, siblings=[3, 40]),
         _cpu(17, package=9, core=2, node=2)],
        [NumaNode(5, CPUSet("3,40"), 10, {5: 10, 2: 30}), NumaNode(2, CPUSet("17"), 10, {5: 30, 2: 10})],
    )
    assert topo.online == CPUSet("3,17,40")
    assert topo.package_ids() == (0, 9)
    assert topo.node_ids() == (2, 5)
    assert topo.nodes_of([40, 17, 3]) == (2, 5)
    assert topo.cores() == (CPUSet("3,40"), CPUSet("17"))
    assert topo.nodes_by_distance(5) == (5, 2)


def test_inconsistent_records_are_rejected():
    node = NumaNode(0, CPUSet("0-1"), 0)
    with pytest.raises(TopologyError, match="unknown NUMA node 3"):
        Topology([_cpu(0, node=3)], [node])
    with pytest.raises(TopologyError, match="siblings"):
        Topology([_cpu(0, core=0, siblings=[0, 1]), _cpu(1, core=1, siblings=[0, 1])], [node])
    with pytest.raises(TopologyError, match="not online"):
        Topology([_cpu(0)], [node])
    with pytest.raises(TopologyError, match="no online CPUs"):
        Topology([], [node])
    with pytest.raises(KeyError, match="unknown package 4"):
        Topology([_cpu(0), _cpu(1)], [node]).package_cpus(4)


# -- real machines -------------------------------------------------------------------------


def test_real_xeon_2_sockets_4_nodes(xeon_4numa_dump):
    topo = discover(xeon_4numa_dump / "2-socket-4-node-40-core")
    assert topo.online == CPUSet("0-79") and topo.isolated == CPUSet()
    assert topo.package_ids() == (0, 1)
    assert len(topo.cores()) == 40 and topo.threads_per_core() == 2
    assert all(topo.siblings(cpu) == CPUSet([cpu, cpu + 40]) for cpu in range(40))
    assert topo.node_ids() == (0, 1, 2, 3)
    assert all(len(topo.node_cpus(n)) == 20 for n in topo.node_ids())
    assert topo.package_node_ids(0) == (0, 1) and topo.package_node_ids(1) == (2, 3)
    # CPU ids interleave across the two nodes of a socket.
    assert topo.node_cpus(0) == CPUSet("0-2,5-6,10-12,15-16,40-42,45-46,50-52,55-56")
    assert topo.nodes_by_distance(0) == (0, 1, 2, 3)
    assert topo.nodes[0].memory_kb == 48005604
    # One L3 per package, one L2 per core, read from cache/index*; no clusters on this kernel.
    assert topo.groups("l3") == (CPUSet("0-19,40-59"), CPUSet("20-39,60-79"))
    assert topo.groups("l2") == topo.cores() and topo.groups("cluster") == ()
    assert topo.groups("die") == (topo.package_cpus(0), topo.package_cpus(1))
    assert (topo.cpu(0).base_khz, topo.cpu(0).max_khz) == (2000000, 3700000)
    assert topo.warnings == () and topo.present == topo.online


def test_real_desktop(multi_dump):
    topo = discover(multi_dump / "desktop")
    assert topo.online == CPUSet("0-19")
    assert topo.package_ids() == (0,) and topo.node_ids() == (0,)
    assert len(topo.cores()) == 10 and topo.threads_per_core() == 2


def test_real_server_with_memory_only_nodes(multi_dump):
    topo = discover(multi_dump / "server")
    assert topo.online == CPUSet("0-111")
    assert topo.package_ids() == (0, 1)
    assert len(topo.cores()) == 56 and topo.threads_per_core() == 2
    assert topo.cpu_node_ids() == (0, 1, 2, 3)
    assert topo.memory_only_node_ids() == (4, 5)
    for nid in range(4):
        assert topo.node_cpus(nid) == CPUSet(range(nid, 112, 4))
    for nid in (4, 5):
        assert 123 * 2**20 < topo.nodes[nid].memory_kb < 125 * 2**20
    assert topo.isolated == CPUSet("4-7,60-63")
    assert topo.closest_memory_only_nodes(0) == (4,)
    assert topo.closest_memory_only_nodes(2) == (5,)
    assert [topo.nodes[n].kind for n in range(6)] == ["dram"] * 4 + ["pmem-cxl"] * 2
    assert len(topo.groups("l3")) == 2 and topo.warnings == ()


def test_real_4_socket_server(multi_dump):
    topo = discover(multi_dump / "4-socket-server-nosnc")
    assert topo.online == CPUSet("0-143")
    assert topo.package_ids() == (0, 1, 2, 3) and topo.node_ids() == (0, 1, 2, 3)
    assert len(topo.cores()) == 72 and topo.threads_per_core() == 2
    for pkg in range(4):
        assert topo.package_node_ids(pkg) == (pkg,)
        assert topo.package_cpus(pkg) == topo.node_cpus(pkg)
        assert 180 * 2**20 < topo.nodes[pkg].memory_kb < 200 * 2**20


def test_generator_interleaved_reproduces_the_real_server(multi_dump, tmp_path):
    """The generator's "interleaved" scheme is the real server's layout."""
    real = discover(multi_dump / "server")
    generate(tmp_path, sockets=2, cores_per_die=28, threads_per_core=2, numa_per_socket=2,
             numbering="interleaved", memory_only_nodes=2, isolated=real.isolated)
    fake = discover(tmp_path)
    assert fake.online == real.online and fake.isolated == real.isolated
    assert set(fake.cores()) == set(real.cores())
    assert [fake.package_cpus(p) for p in (0, 1)] == [real.package_cpus(p) for p in (0, 1)]
    assert [fake.node_cpus(n) for n in fake.node_ids()] == [real.node_cpus(n) for n in real.node_ids()]
    # Not reproduced: on the real machine both memory-only nodes hang off
    # socket 0; the generator spreads them over the sockets.


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(sockets=2, cores_per_die=4, threads_per_core=2, offline="3,12-13", isolated="6-7,12"),
        dict(sockets=2, dies_per_socket=2, cores_per_die=3, threads_per_core=2, numa_per_socket=2,
             numbering="interleaved", memory_only_nodes=3, mem_per_node_kb=7, memory_only_kb=9),
        dict(sockets=3, cores_per_die=2, threads_per_core=1),
    ],
)
def test_fake_topology_equals_discovered_generated_tree(tmp_path, kwargs):
    generate(tmp_path, **kwargs)
    read, built = discover(tmp_path), fake_topology(**kwargs)
    assert read.cpus == built.cpus
    assert read.nodes == built.nodes
    assert (read.online, read.offline, read.isolated) == (built.online, built.offline, built.isolated)


def test_fake_topology_of_the_benchmark_machine():
    topo = fake_topology(sockets=2, cores_per_die=128, threads_per_core=2, numa_per_socket=4,
                         numbering="interleaved")
    assert len(topo.online) == 512 and len(topo.cpu_node_ids()) == 8
    assert all(len(topo.node_cpus(n)) == 64 for n in topo.node_ids())
    assert topo.siblings(5) == CPUSet("5,261")


def test_layout_without_files():
    shape = layout(sockets=2, cores_per_die=2, threads_per_core=2, numbering="interleaved")
    assert [p.cpu for p in shape.places] == list(range(8))
    assert shape.cpus_where(socket=0) == CPUSet("0,2,4,6")


def test_groups_at_every_level_cover_the_online_cpus_and_unknown_levels_are_empty() -> None:
    cpus = [CPUInfo(id=i, package=i // 4, die=0, core=(i % 4) // 2, node=i // 4,
                    siblings=CPUSet({i - i % 2, i - i % 2 + 1}), l3=i - i % 4) for i in range(8)]
    topo = Topology(cpus, [NumaNode(0, CPUSet(range(4)), 1), NumaNode(1, CPUSet(range(4, 8)), 1)])
    for level in LEVELS:
        groups = topo.groups(level)
        if level in ("cluster", "l2"):
            assert groups == ()
            continue
        assert sorted(c for g in groups for c in g) == list(range(8)), level
    assert topo.groups("l3") == (CPUSet(range(4)), CPUSet(range(4, 8)))
    assert topo.groups("core")[1] == CPUSet({2, 3})
