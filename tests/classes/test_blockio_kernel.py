"""The block I/O writer (classes/blockio.py) against cgroup files that take and refuse
writes as the kernel's do (tests/harness/cgroupfs.py): these machines are cgroup v1 without
BFQ or io.cost, so a v2 node's tree is built under a tmp host root (issue 33.1)."""

from pathlib import Path

from cri_resmgr.classes import blockio, cgroups
from tests.harness import cgroupfs
from tests.harness.resctrl import KernelLike

CTR = "kubepods/besteffort/pod1/ctr"


def _v2(root: Path, scheduler: str, bfq: bool, iocost: bool = False) -> tuple[KernelLike, str]:
    cgroupfs.build_v2(root)
    cgroupfs.v2_cgroup(root, CTR, bfq=bfq)
    cgroupfs.disk(root, "254:0", scheduler, iocost=iocost)
    files = KernelLike(str(root))
    assert cgroups.mode(files) == "v2"
    return files, f"{cgroups.CGROUP_ROOT}/{CTR}"


def _v1(root: Path, scheduler: str) -> tuple[KernelLike, Path]:
    d = root / "sys/fs/cgroup/blkio" / CTR
    d.mkdir(parents=True)
    for name in blockio.V1_THROTTLE.values():
        (d / name).write_text("")
    (d / "blkio.bfq.weight_device").write_text("default 100\n")
    (d / "blkio.bfq.weight").write_text("100\n")
    for dev in ("8:0", "8:16"):
        cgroupfs.disk(root, dev, scheduler)
    return KernelLike(str(root)), d


def test_v2_without_bfq_the_cgroups_weight_is_written_and_the_device_line_refused(tmp_path):
    files, d = _v2(tmp_path, "mq-deadline", bfq=False)
    w = blockio.BlkioWriter(files, "v2")
    written = w.write(d, blockio.Limits(devices={"254:0": {"weight": 700}}, weight=400))
    # The kernel takes "default 400" when written on its own, whatever the disk's scheduler.
    assert (tmp_path / "sys/fs/cgroup" / CTR / "io.weight").read_text() == "default 400\n"
    assert written.done == ("io.weight: default 400",)
    assert [str(r) for r in written.refused] == [
        f"'254:0 700' into {tmp_path}/sys/fs/cgroup/{CTR}/io.weight: EOPNOTSUPP (Operation not supported)"]
    assert blockio.weight_unsupported(files, "v2", "254:0") == (
        f"the I/O scheduler of 254:0 is mq-deadline, not bfq ({tmp_path}/sys/dev/block/254:0/queue/scheduler), "
        f"and io.cost is not enabled for it ({tmp_path}/sys/fs/cgroup/io.cost.qos): a per-device weight needs "
        "one of them")
    # Again (the reconcile): the refused line is tried again, nothing else written.
    again = w.write(d, blockio.Limits(devices={"254:0": {"weight": 700}}, weight=400))
    assert again.done == () and len(again.refused) == 1


def test_v2_with_bfq_the_weights_go_to_bfqs_file_too(tmp_path):
    files, d = _v2(tmp_path, "bfq", bfq=True)
    w = blockio.BlkioWriter(files, "v2")
    written = w.write(d, blockio.Limits(devices={"254:0": {"weight": 700}}, weight=400))
    cg = tmp_path / "sys/fs/cgroup" / CTR
    assert (cg / "io.bfq.weight").read_text() == "default 400\n254:0 700\n"
    assert (cg / "io.weight").read_text() == "default 400\n"  # io.cost's: refused 254:0 (not under io.cost)
    assert written.refused == ()  # one file took the device's weight: in force
    assert blockio.weight_unsupported(files, "v2", "254:0") is None
    assert w.write(d, blockio.Limits(devices={"254:0": {"weight": 700}}, weight=400)) == blockio.Written()
    # The class without the weights: BFQ's device line cleared with "default" (it refuses 0), defaults back.
    cleared = w.write(d, blockio.NONE)
    assert cleared.refused == () and (cg / "io.bfq.weight").read_text() == "default 100\n"
    assert (cg / "io.weight").read_text() == "default 100\n"


def test_v2_with_io_cost_the_device_weight_goes_into_io_weight(tmp_path):
    files, d = _v2(tmp_path, "none", bfq=True, iocost=True)
    written = blockio.BlkioWriter(files, "v2").write(d, blockio.Limits(devices={"254:0": {"weight": 700}}))
    assert written.refused == ()
    assert (tmp_path / "sys/fs/cgroup" / CTR / "io.weight").read_text() == "default 100\n254:0 700\n"


def test_v1_a_refused_device_weight_stops_nothing(tmp_path):
    files, d = _v1(tmp_path, "mq-deadline")
    rel = str(d.relative_to(tmp_path))
    limits = blockio.Limits(devices={"8:0": {"wbps": 2000}, "8:16": {"wbps": 1000, "weight": 300}}, weight=200)
    written = blockio.BlkioWriter(files, "v1").write(rel, limits)
    assert [(r.name, r.line, r.reason) for r in written.refused] == [
        ("blkio.bfq.weight_device", "8:16 300", "EOPNOTSUPP (Operation not supported)")]
    assert (d / "blkio.throttle.write_bps_device").read_text() == "8:0 2000\n8:16 1000\n"
    assert (d / "blkio.bfq.weight").read_text() == "200\n"  # after the refused line: written all the same


def test_v1_bfqs_device_weight_is_cleared_with_default(tmp_path):
    files, d = _v1(tmp_path, "bfq")
    rel = str(d.relative_to(tmp_path))
    w = blockio.BlkioWriter(files, "v1")
    assert w.write(rel, blockio.Limits(devices={"8:16": {"weight": 300}})).refused == ()
    assert (d / "blkio.bfq.weight_device").read_text() == "default 100\n8:16 300\n"
    cleared = w.write(rel, blockio.NONE)
    assert cleared.refused == () and cleared.done == ("blkio.bfq.weight_device: 8:16 default",)
    assert (d / "blkio.bfq.weight_device").read_text() == "default 100\n"
