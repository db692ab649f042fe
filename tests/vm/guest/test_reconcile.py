"""The relay's periodic reconcile on cgroup v2, judged by the kernel: a container's cpuset
changed by hand in its own cgroup is put back; a pod cgroup narrowed by hand (which the relay
does not own) leaves the container's cpuset.cpus as the policy wrote it but the kernel runs it
on the narrower cpuset.cpus.effective, and the reconcile says so, naming the container, the
CPUs it runs on and the pod's cgroup (issue 33.2: it read cpuset.cpus and saw nothing wrong,
the container ran on one CPU for good with no word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.vm.guest import cgv2
from tests.vm.guest.conftest import kubelet_for
from tests.vm.guest.frontends import FrontEnd

pytestmark = pytest.mark.topologies("4node")

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
RECONCILE = ("-reconcile-period", "3")


def besteffort(name: str) -> PodSpec:
    return PodSpec(name=name, containers=[ContainerSpec(name="c")])


@pytest.mark.parametrize("version", ["1.6", "2.1.9"])
def test_a_cpuset_changed_by_hand_is_put_back(shared_runtime, workdir: Path, version: str) -> None:
    runtime = shared_runtime(version)
    front = FrontEnd("relay", runtime, workdir, STATIC, RECONCILE).start()
    k = kubelet_for(front.address, runtime)
    try:
        cid = k.start_pod(besteffort("handmade")).container_ids["c"]
        before = cgv2.wait_placement(k, cid, cgv2.online_cpus())
        (before.cgroup / "cpuset.cpus").write_text("3\n")
        assert cgv2.placement(k, cid).cpus == CPUSet([3])  # the kernel took it
        cgv2.wait_placement(k, cid, before.cpus)  # the reconcile sent the policy's cpuset again
        assert "sending its cpuset again" in front.log(), front.log()[-3000:]
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()
            front.stop()


def test_a_pod_cgroup_narrowed_by_hand_is_reported_with_what_the_kernel_enforces(shared_runtime,
                                                                                 workdir: Path) -> None:
    runtime = shared_runtime("1.6")
    front = FrontEnd("relay", runtime, workdir, STATIC, RECONCILE).start()
    k = kubelet_for(front.address, runtime)
    try:
        cid = k.start_pod(besteffort("narrowed")).container_ids["c"]
        p = cgv2.wait_placement(k, cid, cgv2.online_cpus())
        pod_cgroup = p.cgroup.parent
        (pod_cgroup / "cpuset.cpus").write_text("3\n")
        narrowed = cgv2.placement(k, cid)
        # What the kernel does on v2: the container's own file unchanged, its tasks on CPU 3.
        assert CPUSet((p.cgroup / "cpuset.cpus").read_text().strip()) == p.cpus, narrowed
        assert narrowed.cpus == narrowed.allowed_cpus == CPUSet([3]), narrowed
        want = f"runs on CPUs 3 only, not the policy's {p.cpus}"
        cgv2.wait_for(f"the reconcile's warning '{want}'", lambda: want in front.log())
        line = next(x for x in front.log().splitlines() if want in x)
        assert cid[:12] in line and pod_cgroup.name in line, line
        # Widened again (v2 refuses an empty cpuset.cpus on a populated cgroup: ENOSPC).
        (pod_cgroup / "cpuset.cpus").write_text(f"{cgv2.online_cpus()}\n")
        cgv2.wait_placement(k, cid, p.cpus)
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()
            front.stop()
