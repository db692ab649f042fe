"""Block I/O classes under the NRI plugin on the real runtimes (containerd 1.7.24 and 2.1.9,
tests/nri/conftest.py): the plugin's own controller writes the class into the container's
own blkio cgroup from the StartContainer hook, where NRI's container pid and cgroups path
say it is; a class change by SIGHUP follows. This machine: cgroup v1 blkio, /dev/vda."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from tests.harness.podspec import ContainerSpec, PodSpec
from tests.nri.plugin_process import PluginProcess
from tests.nri.test_real_runtimes import kubelet_on, plugin_dir, wait_for  # noqa: F401 (fixtures)

DISK = "/dev/vda"


def _dev() -> str | None:
    try:
        st = os.stat(DISK)
    except OSError:
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}" if stat.S_ISBLK(st.st_mode) else None


DEV = _dev()
pytestmark = [pytest.mark.skipif(DEV is None, reason=f"needs the block device {DISK}"),
              pytest.mark.skipif(not Path("/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device").exists(),
                                 reason="needs cgroup v1 blkio with throttling")]


def _config(limit: str) -> str:
    return ("policy: {Active: static, ReservedResources: {CPU: 1}}\n"
            f"blockio:\n  Classes:\n    slow: [{{Devices: [{DISK}], ThrottleWriteBps: {limit}}}]\n"
            "  QosClasses: {BestEffort: slow}\n")


def test_the_plugin_writes_the_class_into_the_containers_cgroup(nri_containerd, kubelet_on, plugin_dir):  # noqa: F811
    k = kubelet_on
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), "/", _config("1M")).start()
    try:
        wait_for("the plugin's policy", lambda: "policy static active" in plugin.log(), plugin.log)
        cid = k.start_pod(PodSpec(name="nri-slow", containers=[ContainerSpec(name="c")])).container_ids["c"]
        rule = k.cgroup_files(cid).dirs["blkio"] / "blkio.throttle.write_bps_device"
        # In place when the runtime's StartContainer returns: the hook ran before the task started.
        assert rule.read_text().strip() == f"{DEV} 1000000", plugin.log()[-3000:]
        Path(plugin.config_path).write_text(_config("5M"))
        assert plugin.proc is not None
        os.kill(plugin.proc.pid, signal.SIGHUP)
        wait_for("the new limit", lambda: rule.read_text().strip() == f"{DEV} 5000000", plugin.log, 20)
        assert "blockio class slow" in plugin.log()
    finally:
        plugin.stop()
