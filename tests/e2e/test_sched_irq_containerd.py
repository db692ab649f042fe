"""Scheduling classes and IRQ affinity through the real relay in front of the session's
containerd (runc, cgroup v1 with RT group scheduling on these machines):

- a balloon type's fifo class is on every thread of its container as StartContainer
  returns (runc made the container's cgroup with cpu.rt_runtime_us 0: the relay gave the
  chain a budget first), a child forked later inherits it, and a process that joins the
  container later gets it from the reconcile; an annotation's batch class likewise, nice
  and I/O class included, all read back by syscall;
- a controllable IRQ (a real one of this machine) leaves an isolating balloon's CPU while
  its container runs and gets its affinity back when the container goes;
- nothing stays changed: the RT budgets and the IRQ's affinity are as they were after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cri_resmgr.classes.sched import Syscalls
from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
RT_FILE = Path("/sys/fs/cgroup/cpu/cpu.rt_runtime_us")
IRQ = 33  # virtio4-config here: a config-change interrupt, moved for seconds
IRQ_FILE = Path(f"/proc/irq/{IRQ}/smp_affinity_list")
pytestmark = [pytest.mark.skipif(len(ONLINE) != 2, reason="written for the 2-CPU machines"),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]
BALLOON = "balloon.balloons.cri-resource-manager.intel.com"
SCHED = "scheduling-class.resource-policy.nri.io/pod"
# A shell that starts a child two seconds in (after the class was set), then sleeps.
COMMAND = ["/bin/sh", "-c", "sleep 2; sleep 3600 & wait"]

CONFIG = f"""\
policy:
  Active: balloons
  ReservedResources: {{CPU: 1}}
  balloons:
    SchedulingClasses:
      - {{Name: realtime, Policy: fifo, Priority: 42, IOClass: rt, IOPriority: 3}}
      - {{Name: background, Policy: batch, Nice: 7, IOClass: idle}}
    ControllableInterrupts: [{IRQ}]
    BalloonTypes:
      - {{Name: rt, SchedulingClass: realtime, MaxBalloons: 1}}
      - {{Name: quiet, IRQMode: isolate, MinCPUs: 1, MaxBalloons: 1}}
"""


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-sched-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _wait(what: str, check, timeout: float = 20.0, log=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s\n{log()[-3000:]}")
        time.sleep(0.1)


def _tids(cgroup_dir: Path) -> list[int]:
    return [int(t) for t in (cgroup_dir / "tasks").read_text().split()]


def _rt_values(root: Path) -> dict[str, str]:
    return {str(p): p.read_text().strip() for p in root.rglob("cpu.rt_runtime_us")}


def test_classes_on_every_thread_children_and_latecomers_and_an_irq_off_an_isolated_balloon(
        containerd, cgroup_root, workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text(CONFIG)
    irq_before = IRQ_FILE.read_text().strip()
    rt_root = Path("/sys/fs/cgroup/cpu") / cgroup_root.strip("/")
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-reconcile-period", "1"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    calls = Syscalls()
    joined: subprocess.Popen | None = None
    try:
        rt = k.start_pod(PodSpec(name="rt", annotations={BALLOON: "rt"},
                                 containers=[ContainerSpec(name="c", command=COMMAND)]))
        bg = k.start_pod(PodSpec(name="bg", annotations={SCHED: "background"},
                                 containers=[ContainerSpec(name="c", command=COMMAND)]))
        rt_cpu = k.cgroup_files(rt.container_ids["c"]).dirs["cpu"]
        bg_dir = k.cgroup_files(bg.container_ids["c"]).dirs["cpu"]
        # As StartContainer returned: the container's init, and its chain's RT budget.
        init = _tids(rt_cpu)
        assert init and all(os.sched_getscheduler(t) == os.SCHED_FIFO for t in init), relay.log()[-3000:]
        assert all(os.sched_getparam(t).sched_priority == 42 for t in init)
        assert {(calls.current(t).io_class, calls.current(t).io_priority) for t in init} == {("rt", 3)}
        assert int((rt_cpu / "cpu.rt_runtime_us").read_text()) > 0
        for t in _tids(bg_dir):
            c = calls.current(t)
            assert (c.policy, c.nice, c.io_class) == ("batch", 7, "idle"), relay.log()[-3000:]
        # The child forked two seconds in inherits the class.
        _wait("the container's child", lambda: len(_tids(rt_cpu)) >= 2)
        assert {os.sched_getscheduler(t) for t in _tids(rt_cpu)} == {os.SCHED_FIFO}
        assert {calls.current(t).policy for t in _tids(bg_dir)} == {"batch"}
        # A process that joins the container later (as an exec would) gets it from the reconcile.
        joined = subprocess.Popen(["sleep", "3600"])
        blkio = k.cgroup_files(rt.container_ids["c"]).dirs["blkio"]
        (blkio / "tasks").write_text(str(joined.pid))
        assert os.sched_getscheduler(joined.pid) == os.SCHED_OTHER
        _wait("the reconcile's class on the latecomer", lambda: os.sched_getscheduler(joined.pid) == os.SCHED_FIFO,
              log=relay.log)
        assert "scheduling class realtime (fifo priority 42, I/O rt 3)" in relay.log()

        joined.kill()
        joined.wait()
        joined = None
        k.delete_pod(rt)
        k.delete_pod(bg)
        # The container gone, the budget its chain was given goes back (parents last).
        _wait("the RT budget back", lambda: set(_rt_values(rt_root).values()) <= {"0"}, log=relay.log)

        # The IRQ leaves the isolated balloon's CPU, and comes back when it goes.
        assert irq_before == "0-1"
        quiet = k.start_pod(PodSpec(name="quiet", annotations={BALLOON: "quiet"},
                                    containers=[ContainerSpec(name="c", requests={"cpu": "1", "memory": "16Mi"})]))
        quiet_cpus = CPUSet.parse(k.cgroup_files(quiet.container_ids["c"]).cpuset_cpus())
        _wait("the IRQ off the quiet balloon", lambda: IRQ_FILE.read_text().strip() == str(ONLINE - quiet_cpus),
              log=relay.log)
        k.delete_pod(quiet)
        _wait("the IRQ back", lambda: IRQ_FILE.read_text().strip() == irq_before, log=relay.log)
    finally:
        if joined is not None:
            joined.kill()
            joined.wait()
        try:
            k.delete_all_pods()  # raises when the relay died: the IRQ is put back all the same
        finally:
            relay.stop()
            k.close()
            if IRQ_FILE.read_text().strip() != irq_before:  # a relay that died unclean: the test's own cleanup
                IRQ_FILE.write_text(irq_before)
                pytest.fail(f"the relay left IRQ {IRQ} at another affinity (put back to {irq_before})")
    # Nothing on the host stays changed: the IRQ as it was, no RT budget left up the chain.
    assert IRQ_FILE.read_text().strip() == irq_before
    assert {v for v in _rt_values(rt_root).values()} <= {"0"}, _rt_values(rt_root)
    assert RT_FILE.read_text().strip() == "950000"


CONFIG_WITHOUT_IRQS = "\n".join(line for line in CONFIG.splitlines()
                                if "ControllableInterrupts" not in line and "IRQMode" not in line) + "\n"


def test_a_relay_killed_with_an_irq_moved_gives_it_back_at_its_next_start(containerd, cgroup_root, workdir):
    """SIGKILL leaves the IRQ moved; the next start (same state directory, a configuration
    without the list) gives back what it had before the first run."""
    cfg = workdir / "config.yaml"
    cfg.write_text(CONFIG)
    irq_before = IRQ_FILE.read_text().strip()
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        assert irq_before == "0-1"
        quiet = k.start_pod(PodSpec(name="quiet", annotations={BALLOON: "quiet"},
                                    containers=[ContainerSpec(name="c", requests={"cpu": "1", "memory": "16Mi"})]))
        quiet_cpus = CPUSet.parse(k.cgroup_files(quiet.container_ids["c"]).cpuset_cpus())
        _wait("the IRQ off the quiet balloon", lambda: IRQ_FILE.read_text().strip() == str(ONLINE - quiet_cpus),
              log=relay.log)
        relay.kill()  # a crash: no shutdown
        assert IRQ_FILE.read_text().strip() == str(ONLINE - quiet_cpus)
        assert (Path(relay.state_dir) / "irq-originals.json").exists()
        cfg.write_text(CONFIG_WITHOUT_IRQS)
        relay.start()
        _wait("the IRQ back at the next start", lambda: IRQ_FILE.read_text().strip() == irq_before, log=relay.log)
        assert "given back 0-1, what it had before an earlier run" in relay.log()
    finally:
        try:
            if relay.proc is None:  # failed while it was down: up again, so that the pods can go
                relay.start()
            k.delete_all_pods()
        finally:
            relay.stop()
            k.close()
            if IRQ_FILE.read_text().strip() != irq_before:  # the test's own cleanup, then the failure
                IRQ_FILE.write_text(irq_before)
                pytest.fail(f"the relay left IRQ {IRQ} at another affinity (put back to {irq_before})")
    assert IRQ_FILE.read_text().strip() == irq_before
