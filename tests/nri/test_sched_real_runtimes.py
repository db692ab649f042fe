"""Scheduling classes under the NRI plugin on the real runtimes (containerd 1.7.24 and 2.1.9,
both NRI < 0.11: no scheduler adjustment): the plugin's StartContainer hook puts the class
on the container's process, where NRI's pid and cgroups path say it is, before the task
runs (cgroup v1 with RT group scheduling: the chain gets an RT budget first); a child the
container forks later inherits it. Read back by syscall; nothing stays after."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cri_resmgr.classes.sched import Syscalls
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.nri.plugin_process import PluginProcess
from tests.nri.test_real_runtimes import kubelet_on, plugin_dir, wait_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

CONFIG = """\
policy:
  Active: balloons
  ReservedResources: {CPU: 1}
  balloons:
    SchedulingClasses:
      - {Name: realtime, Policy: rr, Priority: 21, IOClass: be, IOPriority: 1}
      - {Name: background, Policy: idle, Nice: 9, IOClass: idle}
    BalloonTypes:
      - {Name: rt, Namespaces: [rt], SchedulingClass: realtime}
"""
COMMAND = ["/bin/sh", "-c", "sleep 2; sleep 3600 & wait"]


def _tids(d: Path) -> list[int]:
    return [int(t) for t in (d / "tasks").read_text().split()]


def test_the_plugin_puts_the_class_on_the_containers_threads(nri_containerd, kubelet_on, plugin_dir):  # noqa: F811
    k = kubelet_on
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), "/", CONFIG).start()
    calls = Syscalls()
    root = Path("/sys/fs/cgroup/cpu") / nri_containerd.owned_cgroup_roots[0].strip("/")
    try:
        wait_for("the plugin's policy", lambda: "policy balloons active" in plugin.log(), plugin.log)
        rt = k.start_pod(PodSpec(name="nri-rt", namespace="rt", containers=[ContainerSpec(name="c", command=COMMAND)]))
        bg = k.start_pod(PodSpec(name="nri-bg", annotations={"scheduling-class.resource-policy.nri.io": "background"},
                                 containers=[ContainerSpec(name="c", command=COMMAND)]))
        rt_dir = k.cgroup_files(rt.container_ids["c"]).dirs["cpu"]
        bg_dir = k.cgroup_files(bg.container_ids["c"]).dirs["cpu"]
        # As the runtime's StartContainer returned: the hook ran before the task's process did.
        for t in _tids(rt_dir):
            c = calls.current(t)
            assert (c.policy, c.priority, c.io_class, c.io_priority) == ("rr", 21, "be", 1), plugin.log()[-3000:]
        assert int((rt_dir / "cpu.rt_runtime_us").read_text()) > 0
        for t in _tids(bg_dir):
            c = calls.current(t)
            assert (c.policy, c.nice, c.io_class) == ("idle", 9, "idle"), plugin.log()[-3000:]
        deadline = time.monotonic() + 20
        while len(_tids(rt_dir)) < 2:  # the child forked two seconds in
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert {os.sched_getscheduler(t) for t in _tids(rt_dir)} == {os.SCHED_RR}
        assert {calls.current(t).policy for t in _tids(bg_dir)} == {"idle"}
        k.delete_pod(rt)
        k.delete_pod(bg)
    finally:
        k.delete_all_pods()
        plugin.stop()
    values = {str(p): p.read_text().strip() for p in root.rglob("cpu.rt_runtime_us")}
    assert set(values.values()) <= {"0"}, values
