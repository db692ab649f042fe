"""In-place resize and a container's exit on cgroup v2, under the static policy on the 4-node
guest, through the relay (containerd 1.6 and 2.1.9) and the plugin (2.1.9). A resize as
kubelet sends it (UpdateContainerResources with the new shares and quota): the kernel's
cpu.max and cpu.weight carry kubelet's values and the container's exclusive CPUs grow and
shrink in cpuset.cpus.effective, the shared container following. A container whose process
dies: its exclusive CPUs go back to the shared container."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.harness.kubelet import Kubelet
from tests.harness.podspec import LinuxResources, milli_cpu_to_quota, milli_cpu_to_shares
from tests.vm.guest import cgv2
from tests.vm.guest.conftest import kubelet_for
from tests.vm.guest.frontends import COMBINATIONS, FrontEnd
from tests.vm.guest.test_policies import CONFIGS, besteffort, guaranteed, wait_exclusive

pytestmark = pytest.mark.topologies("4node")

IDS = [f"{k}-{v}" for k, v in COMBINATIONS]
MEMORY = 64 << 20


def resized(milli: int) -> LinuxResources:
    """What kubelet sends for a Guaranteed container resized to `milli` CPU."""
    return LinuxResources(cpu_shares=milli_cpu_to_shares(milli), cpu_quota=milli_cpu_to_quota(milli),
                          cpu_period=100000, memory_limit_in_bytes=MEMORY, oom_score_adj=-997)


def cgroup_v2_weight(shares: int) -> int:
    """runc's conversion of CPU shares to cpu.weight (libcontainer/cgroups ConvertCPUSharesToCgroupV2Value)."""
    return 1 + ((shares - 2) * 9999) // 262142


def check_cpu_files(k: Kubelet, cid: str, milli: int) -> None:
    cg = cgv2.placement(k, cid).cgroup
    assert (cg / "cpu.max").read_text().split() == [str(milli_cpu_to_quota(milli)), "100000"], cg
    assert int((cg / "cpu.weight").read_text()) == cgroup_v2_weight(milli_cpu_to_shares(milli)), cg


@pytest.mark.parametrize(("kind", "version"), COMBINATIONS, ids=IDS)
def test_a_resize_grows_and_shrinks_the_exclusive_cpus_and_an_exit_returns_them(shared_runtime, workdir: Path,
                                                                                kind: str, version: str) -> None:
    """One front end for both (a start costs tens of seconds here)."""
    runtime = shared_runtime(version)
    front = FrontEnd(kind, runtime, workdir, CONFIGS["static"], ("-reconcile-period", "3")).start()
    k = kubelet_for(front.address, runtime)
    try:
        shared = k.start_pod(besteffort("shared")).container_ids["c"]
        g = k.start_pod(guaranteed("g", cpu="2")).container_ids["c"]
        p2 = wait_exclusive(k, g, 2)
        check_cpu_files(k, g, 2000)
        pid = k.container_pid(g)

        k.update_container_resources(g, resized(4000))
        p4 = cgv2.wait_for(  # 4 CPUs: two cores, on two nodes here (one core each)
            "the resize to 4 CPUs", lambda: (q := cgv2.placement(k, g)) and len(q.cpus) == 4
            and q.allowed_cpus == q.cpus and q)
        assert p2.cpus <= p4.cpus, f"the resize moved the container's CPUs: {p2} -> {p4}"
        assert cgv2.whole_cores(p4.cpus), p4
        assert p4.mems == cgv2.node_of(p4.cpus) == p4.allowed_mems, p4
        check_cpu_files(k, g, 4000)
        cgv2.wait_placement(k, shared, cgv2.online_cpus() - p4.cpus)

        k.update_container_resources(g, resized(2000))
        p_back = cgv2.wait_for("the resize back to 2 CPUs", lambda: (q := cgv2.placement(k, g)) and len(q.cpus) == 2
                               and q.allowed_cpus == q.cpus and q)
        assert p_back.cpus <= p4.cpus, f"shrinking took CPUs it did not have: {p4} -> {p_back}"
        check_cpu_files(k, g, 2000)
        cgv2.wait_placement(k, shared, cgv2.online_cpus() - p_back.cpus)
        assert k.container_pid(g) == pid, "the resize restarted the container"

        os.kill(pid, signal.SIGKILL)  # the container's process dies: it exits
        cgv2.wait_for(f"{g[:12]} exited", lambda: k.container_status(g).status.state == 2)  # CONTAINER_EXITED
        cgv2.wait_placement(k, shared, cgv2.online_cpus())  # its CPUs went back to the shared pool
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()
            front.stop()
