"""Block I/O classes for real: the relay in front of the session's containerd, this
machine's blkio cgroups (v1) and its disk. A container writing with O_DIRECT under a
`ThrottleWriteBps: 1M` class writes at most ~1 MB/s, one without a class much faster;
the container's own cgroup files hold the rules; SIGHUP changes them; nothing is left
after the container goes. Rates are bytes the kernel counted in the container's cgroup
over a measured interval, not the test's wall time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

DISK = "/dev/vda"


def _disk() -> str | None:
    try:
        st = os.stat(DISK)
    except OSError:
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISBLK(st.st_mode) else None


DEV = _disk()
pytestmark = [
    pytest.mark.skipif(DEV is None, reason=f"needs the block device {DISK}"),
    pytest.mark.skipif(not Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device").exists(),
                       reason="needs cgroup v1 blkio with throttling"),
]

CLASS = "blockioclass.cri-resource-manager.intel.com/pod"
# Writes 64 KiB blocks with O_DIRECT into the container's own file system (on /dev/vda), over and over.
WRITER = ["/bin/sh", "-c", "sleep 1; while true; do dd if=/dev/zero of=/ddfile bs=64k count=200 oflag=direct "
          "2>/dev/null; rm -f /ddfile; done"]


def _config(throttle: str) -> str:
    return ("policy: {Active: static, ReservedResources: {CPU: 1}}\n"
            "blockio:\n"
            "  Classes:\n"
            "    slowwriter:\n"
            f"      - Devices: [{DISK}]\n"
            f"        {throttle}\n")


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-bio-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _written(cgroup_dir: Path) -> int:
    """Bytes the kernel counted written to the disk by this cgroup."""
    total = 0
    for line in (cgroup_dir / "blkio.throttle.io_service_bytes").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == DEV and parts[1] == "Write":
            total += int(parts[2])
    return total


def _rate(cgroup_dir: Path, seconds: float = 3.0) -> float:
    b0, t0 = _written(cgroup_dir), time.monotonic()
    time.sleep(seconds)
    b1, t1 = _written(cgroup_dir), time.monotonic()
    return (b1 - b0) / (t1 - t0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def _wait_file(path: Path, want: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (got := path.read_text().strip()) != want:
        if time.monotonic() > deadline:
            pytest.fail(f"{path} holds {got!r}, want {want!r}")
        time.sleep(0.1)


def test_throttled_class_limits_direct_writes_and_follows_sighup(containerd, cgroup_root, workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text(_config("ThrottleWriteBps: 1M"))
    port = _free_port()
    dump = workdir / "dump.log"
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-metrics-address", f"127.0.0.1:{port}",
                          "-dump", "name:StartContainer", "-dump-file", str(dump)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        slow = k.start_pod(PodSpec(name="slow", annotations={CLASS: "slowwriter"},
                                   containers=[ContainerSpec(name="c", command=WRITER)]))
        fast = k.start_pod(PodSpec(name="fast", containers=[ContainerSpec(name="c", command=WRITER)]))
        slow_dir = k.cgroup_files(slow.container_ids["c"]).dirs["blkio"]
        fast_dir = k.cgroup_files(fast.container_ids["c"]).dirs["blkio"]
        # The rule is in the container's own cgroup (not the pod's) as StartContainer returns.
        assert (slow_dir / "blkio.throttle.write_bps_device").read_text().strip() == f"{DEV} 1000000"
        assert (slow_dir.parent / "blkio.throttle.write_bps_device").read_text().strip() == ""
        assert (fast_dir / "blkio.throttle.write_bps_device").read_text().strip() == ""

        # /state and the metrics tell the class; the dump tells what was written where.
        state = {c["pod"]: c for c in json.loads(_get(port, "/state"))["containers"]}
        assert (state["slow"]["blockio_class"], state["fast"]["blockio_class"]) == ("slowwriter", None)
        assert 'cri_resmgr_class_assignments_total{class="slowwriter",kind="blockio"} 1.0' in _get(port, "/metrics")
        deadline = time.monotonic() + 10
        while f"wrote '{DEV} 1000000' to {slow_dir}/blkio.throttle.write_bps_device" not in dump.read_text():
            assert time.monotonic() < deadline, dump.read_text()[-2000:]
            time.sleep(0.1)

        time.sleep(1.5)  # both writing
        slow_rate, fast_rate = _rate(slow_dir), _rate(fast_dir)
        assert slow_rate <= 1.5e6, f"throttled to 1 MB/s, wrote {slow_rate / 1e6:.2f} MB/s"
        assert fast_rate >= 3 * max(slow_rate, 1e6), \
            f"unthrottled {fast_rate / 1e6:.2f} MB/s is not much more than throttled {slow_rate / 1e6:.2f} MB/s"

        # A class change by SIGHUP: the new limit replaces the old one...
        cfg.write_text(_config("ThrottleWriteBps: 2Mi"))
        relay.signal(signal.SIGHUP)
        _wait_file(slow_dir / "blkio.throttle.write_bps_device", f"{DEV} {2 * 1024 * 1024}")
        # ...and what the class no longer has is cleared from the cgroup.
        cfg.write_text(_config("ThrottleReadIOPS: 500"))
        relay.signal(signal.SIGHUP)
        _wait_file(slow_dir / "blkio.throttle.read_iops_device", f"{DEV} 500")
        _wait_file(slow_dir / "blkio.throttle.write_bps_device", "")

        # Containers found at start-up get the class of the configuration then in force.
        relay.stop()
        cfg.write_text(_config("ThrottleWriteBps: 3M"))
        relay.start()
        _wait_file(slow_dir / "blkio.throttle.write_bps_device", f"{DEV} 3000000", timeout=5)
        _wait_file(slow_dir / "blkio.throttle.read_iops_device", "", timeout=5)
        assert (fast_dir / "blkio.throttle.write_bps_device").read_text().strip() == ""

        # The container's removal leaves nothing: its cgroup, rules and all, is gone.
        k.delete_pod(slow)
        assert not slow_dir.exists()
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
    log = relay.log()
    assert "block I/O class slowwriter" in log or "blockio class slowwriter" in log, log[-3000:]


def test_classes_under_the_none_policy(containerd, cgroup_root, workdir):
    """The none policy reads nothing, but a configuration with classes has StartContainer
    intercepted: the class is in place as it returns; without classes nothing is read again."""
    cfg = workdir / "config.yaml"
    cfg.write_text(f"blockio:\n  Classes:\n    slowwriter: [{{Devices: [{DISK}], ThrottleWriteBps: 1M}}]\n")
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg), "-policy", "none"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        slow = k.start_pod(PodSpec(name="none-slow", annotations={CLASS: "slowwriter"},
                                   containers=[ContainerSpec(name="c")])).container_ids["c"]
        other = k.start_pod(PodSpec(name="none-other", containers=[ContainerSpec(name="c")])).container_ids["c"]
        rule = k.cgroup_files(slow).dirs["blkio"] / "blkio.throttle.write_bps_device"
        assert rule.read_text().strip() == f"{DEV} 1000000", relay.log()[-3000:]
        assert (k.cgroup_files(other).dirs["blkio"] / "blkio.throttle.write_bps_device").read_text().strip() == ""
        cfg.write_text("logger: {Debug: false}\n")  # no classes any more: the rule goes, nothing is intercepted
        relay.signal(signal.SIGHUP)
        _wait_file(rule, "")
        later = k.start_pod(PodSpec(name="none-later", annotations={CLASS: "slowwriter"},
                                    containers=[ContainerSpec(name="c")])).container_ids["c"]
        assert (k.cgroup_files(later).dirs["blkio"] / "blkio.throttle.write_bps_device").read_text().strip() == ""
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
