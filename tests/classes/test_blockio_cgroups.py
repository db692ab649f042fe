"""The block I/O writer on cgroup v2 (this machine is v1: the real test covers that) and
finding a container's cgroup (classes/blockio.py, cgroups.py), on files under a tmp root."""

from pathlib import Path

from cri_resmgr.classes import blockio, cgroups
from cri_resmgr.classes.hostfs import DryRun, HostRoot
from cri_resmgr.config.classes import BlockioRule


class Files(HostRoot):
    """Plain files standing in for a cgroup's: a write replaces the content (enough here)."""

    def __init__(self, root: Path):
        super().__init__(str(root))
        self.writes: list[tuple[str, str]] = []

    def write(self, rel: str, text: str) -> None:
        self.writes.append((rel.rsplit("/", 1)[-1], text))

    def block_device(self, rel: str):
        return {"dev/sda": (8, 0), "dev/sdb": (8, 16)}.get(rel)


def _v2(root: Path, io_max: str = "", weight: str = "default 100\n") -> Path:
    d = root / "sys/fs/cgroup/kubepods/pod1/ctr"
    d.mkdir(parents=True)
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (d / "io.max").write_text(io_max)
    (d / "io.weight").write_text(weight)
    (root / "dev").mkdir()
    for name in ("sda", "sdb", "null"):
        (root / "dev" / name).write_text("")
    return d


def test_v2_io_max_and_weight_set_and_cleared(tmp_path):
    _v2(tmp_path, io_max="8:16 rbps=max wbps=5000 riops=max wiops=max\n", weight="default 300\n")
    files = Files(tmp_path)
    assert cgroups.mode(files) == "v2"
    limits, unmatched = blockio.resolve([BlockioRule(devices=("/dev/sd*",), throttle_read_bps=1000),
                                         BlockioRule(devices=("/dev/sda", "/dev/nvme*"), weight=200)], files)
    assert limits.devices == {"8:0": {"rbps": 1000, "weight": 200}, "8:16": {"rbps": 1000}}
    assert unmatched == ["/dev/nvme*"]
    w = blockio.BlkioWriter(files, "v2")
    w.write("sys/fs/cgroup/kubepods/pod1/ctr", limits)
    assert files.writes == [("io.max", "8:0 rbps=1000 wbps=max riops=max wiops=max"), ("io.weight", "8:0 200"),
                            ("io.max", "8:16 rbps=1000 wbps=max riops=max wiops=max"),
                            ("io.weight", "default 100")]  # the cgroup weight it had (300) is not the class's


def test_v1_nothing_to_change_writes_nothing(tmp_path):
    d = tmp_path / "sys/fs/cgroup/blkio/kubepods/ctr"
    d.mkdir(parents=True)
    (d / "blkio.throttle.write_bps_device").write_text("8:0 1000000\n")
    for name in ("read_bps", "read_iops", "write_iops"):
        (d / f"blkio.throttle.{name}_device").write_text("")
    (d / "blkio.weight_device").write_text("")
    (d / "blkio.weight").write_text("500\n")
    files = Files(tmp_path)
    w = blockio.BlkioWriter(files, "v1")
    rel = "sys/fs/cgroup/blkio/kubepods/ctr"
    assert w.missing(rel) == []
    w.write(rel, blockio.Limits(devices={"8:0": {"wbps": 1000000}}))
    assert files.writes == []
    w.write(rel, blockio.Limits(weight=300))  # no blkio.bfq.*: the CFQ files
    assert files.writes == [("blkio.throttle.write_bps_device", "8:0 0"), ("blkio.weight", "300")]


def test_missing_files_are_named(tmp_path):
    d = tmp_path / "sys/fs/cgroup/blkio/ctr"
    d.mkdir(parents=True)
    (d / "blkio.throttle.write_bps_device").write_text("")
    missing = blockio.BlkioWriter(Files(tmp_path), "v1").missing("sys/fs/cgroup/blkio/ctr")
    assert missing == ["blkio.throttle.read_bps_device", "blkio.throttle.read_iops_device",
                       "blkio.throttle.write_iops_device", "blkio.bfq.weight_device or blkio.weight_device",
                       "blkio.bfq.weight or blkio.weight"]


def test_the_containers_cgroup_from_proc_or_its_cgroups_path(tmp_path):
    files = HostRoot(str(tmp_path))
    (tmp_path / "proc/42").mkdir(parents=True)
    (tmp_path / "proc/42/cgroup").write_text("12:pids:/kubepods/p/c\n9:blkio:/kubepods/p/c\n0::/\n")
    (tmp_path / "sys/fs/cgroup/blkio/kubepods/p/c").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/blkio/kubepods/p/c/tasks").write_text("42\n43\n")
    assert cgroups.container_dir(files, "v1", cgroups.Where(pid=42)) == "sys/fs/cgroup/blkio/kubepods/p/c"
    assert cgroups.threads(files, "v1", cgroups.Where(pid=42)) == [42, 43]
    # No PID (or it is gone): the runtime spec's path, systemd's form expanded.
    sysd = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-abc.scope"
    assert cgroups.systemd_path("kubepods-besteffort-pod1.slice:cri-containerd:abc") == sysd
    (tmp_path / "sys/fs/cgroup/blkio" / sysd).mkdir(parents=True)
    where = cgroups.Where(pid=7, cgroups_path="kubepods-besteffort-pod1.slice:cri-containerd:abc")
    assert cgroups.container_dir(files, "v1", where) == "sys/fs/cgroup/blkio/" + sysd
    assert cgroups.container_dir(files, "v1", cgroups.Where(cgroups_path="/gone")) is None
    # A PID whose cgroup does not name the container is another process's (the PID reused).
    assert cgroups.container_dir(files, "v1", cgroups.Where(pid=42, container_id="c")) == \
        "sys/fs/cgroup/blkio/kubepods/p/c"
    assert cgroups.container_dir(files, "v1", cgroups.Where(pid=42, container_id="other")) is None


def test_paths_never_leave_the_root_and_dry_run_writes_nothing(tmp_path, caplog):
    files = HostRoot(str(tmp_path))
    try:
        files.read("sys/../../etc/passwd")
        raise AssertionError("read outside the root")
    except OSError as e:
        assert "'..'" in str(e)
    (tmp_path / "f").write_text("old")
    caplog.set_level("INFO")
    DryRun(files).write("f", "new\n")
    DryRun(files).mkdir("g")
    assert (tmp_path / "f").read_text() == "old" and not (tmp_path / "g").exists()
    assert f"dry-run: would write 'new' to {tmp_path}/f" in caplog.text


def test_a_short_id_inside_another_cgroup_path_is_not_the_containers(tmp_path):
    # The fault: a test's container "c1" matched a host tool's memory cgroup
    # "/process_api/3dd...b30c1f0" by substring, so a scheduling class landed on every
    # process of that cgroup, the suite's own pytest included.
    files = HostRoot(str(tmp_path))
    (tmp_path / "proc/42").mkdir(parents=True)
    (tmp_path / "proc/42/cgroup").write_text("4:memory:/process_api/3ddb30c1f0\n1:cpu:/\n7:blkio:/\n0::/\n")
    for d in ("memory/process_api/3ddb30c1f0", "cpu", "blkio"):
        (tmp_path / "sys/fs/cgroup" / d).mkdir(parents=True, exist_ok=True)
        (tmp_path / "sys/fs/cgroup" / d / "tasks").write_text("1\n42\n43\n")
    where = cgroups.Where(pid=42, container_id="c1")
    for controller in ("memory", "cpu", "blkio"):
        assert cgroups.container_dir(files, "v1", where, controller) is None
    assert cgroups.threads(files, "v1", where) == []
    # A hierarchy's root is nobody's container, even when the runtime says "/".
    assert cgroups.container_dir(files, "v1", cgroups.Where(pid=42, cgroups_path="/"), "cpu") is None
    # The forms runtimes use do name it.
    for path in ("/kubepods/besteffort/pod1/c1", "/kubepods.slice/x.slice/cri-containerd-c1.scope",
                 "/kubepods.slice/crio-c1.scope/container", "/system.slice/docker-c1.scope"):
        assert cgroups.names(path, "c1"), path
    for path in ("/process_api/3ddb30c1f0", "/kubepods/pod1/c10", "/kubepods/pod1/xc1", "/"):
        assert not cgroups.names(path, "c1"), path
