"""The start/update race (issue 28.4), against the real containerd, checked in the
real cgroup files and /proc/PID/status.

containerd applies an UpdateContainerResources to a container that is not yet
running only to its spec: a container whose StartContainer is in flight (its task
already created from the old spec, not yet marked started) keeps the old cpuset in
its cgroup. The session containerd's "crirm-gated" runtime handler holds a
container's `runc start` at a gate, so the test puts the update in that window
every time instead of by luck.

This machine has 2 CPUs: the static policy reserves 1 and gives 1 exclusive.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cgroupfs
from tests.harness.containerd import GATED_RUNTIME, Containerd
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
ALL = str(ONLINE)
RESERVED = str(CPUSet([ONLINE.min()]))
EXCLUSIVE = str(CPUSet([ONLINE.sorted()[1]]))
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-race-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _relay(workdir: Path, containerd: Containerd, *args: str) -> RelayProcess:
    cfg = workdir / "config.yaml"
    cfg.write_text(STATIC)
    return RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg), *args]).start()


def _shared_pod(name: str) -> PodSpec:
    return PodSpec(name=name, containers=[ContainerSpec(name="c")], runtime_handler=GATED_RUNTIME)


def _guaranteed(name: str) -> PodSpec:
    res = {"cpu": "1", "memory": "32Mi"}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def _real(k: Kubelet, cid: str) -> tuple[CPUSet, CPUSet]:
    """The container's cpuset cgroup file and its init process's Cpus_allowed_list."""
    return (CPUSet(k.cgroup_files(cid).cpuset_cpus()),
            CPUSet(cgroupfs.cpus_allowed_list(k.container_pid(cid))))


def _spec_cpus(k: Kubelet, cid: str) -> str:
    """The cpuset containerd's spec of the container holds (what it accepted)."""
    return str(k.container_info(cid)["runtimeSpec"]["linux"]["resources"]["cpu"].get("cpus", ""))


def _wait(what, check, timeout: float = 30.0):
    """Polls `check` until it returns a true value (bounded); fails with `what()`."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what()} within {timeout}s")
        time.sleep(0.05)


def _race(k: Kubelet, containerd: Containerd, shared: PodSpec, start) -> tuple[str, str]:
    """Creates the shared container, holds its start inside containerd (`start(cid)`
    runs in a thread), and meanwhile starts a Guaranteed pod that takes the
    exclusive CPU; returns (shared container id, exclusive container id) after the
    held start was released and has returned."""
    sandbox = k.run_pod(shared)
    a = k.create_container(shared, sandbox, "c")
    containerd.hold_start(a)
    failure: list[BaseException] = []

    def starting() -> None:
        try:
            start(a)
        except BaseException as e:  # reported by the test below
            failure.append(e)

    t = threading.Thread(target=starting, name="held-start")
    t.start()
    try:
        containerd.wait_held(a)
        g = k.start_pod(_guaranteed(shared.name + "-excl")).container_ids["c"]
        # containerd took the shrunk shared cpuset into the held container's spec...
        _wait(lambda: f"containerd's spec of {a[:12]} never got cpuset {RESERVED}",
              lambda: _spec_cpus(k, a) == RESERVED)
    finally:
        containerd.release_start(a)
        t.join(30)
    assert not t.is_alive() and not failure, failure
    return a, g


def test_update_racing_a_start_through_the_relay_reaches_the_cgroup(containerd, cgroup_root, workdir):
    """The relay sees the StartContainer in flight: the update it sent meanwhile is
    sent again once the start returns (no reconcile needed: it is off)."""
    relay = _relay(workdir, containerd, "-reconcile-period", "0")
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        a, g = _race(k, containerd, _shared_pod("race-shared"), k.start_container)
        # ...and the running container's real cpuset follows it, not the one its task was made with.
        _wait(lambda: f"shared container {a[:12]} still runs on the exclusive CPU {EXCLUSIVE} "
              f"(cgroup, Cpus_allowed_list: {_real(k, a)})",
              lambda: _real(k, a) == (CPUSet(RESERVED), CPUSet(RESERVED)))
        assert _real(k, g) == (CPUSet(EXCLUSIVE), CPUSet(EXCLUSIVE))
        assert "sent again after its start" in relay.log()
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


def test_reconcile_resends_what_a_start_behind_the_relay_lost(containerd, cgroup_root, workdir):
    """The start goes to containerd directly (as one in flight when the relay
    restarted would): only the reconcile, comparing the real cpusets with the
    policy's, can see that the update was lost."""
    relay = _relay(workdir, containerd, "-reconcile-period", "1")
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    direct = Kubelet(containerd.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        a, g = _race(k, containerd, _shared_pod("lost-shared"), direct.start_container)
        _wait(lambda: f"the reconcile never fixed shared container {a[:12]} "
              f"(cgroup, Cpus_allowed_list: {_real(k, a)})",
              lambda: _real(k, a) == (CPUSet(RESERVED), CPUSet(RESERVED)))
        assert _real(k, g) == (CPUSet(EXCLUSIVE), CPUSet(EXCLUSIVE))
        # Said once, for that container alone: the others' cgroups hold what the policy gave them.
        time.sleep(1.5)  # another reconcile or so: nothing more to send (not a timing assertion)
        lines = [line for line in relay.log().splitlines() if "its cpuset again" in line]
        assert len(lines) == 1 and "default/lost-shared:c" in lines[0], lines
    finally:
        k.delete_all_pods()
        k.close()
        direct.close()
        relay.stop()
