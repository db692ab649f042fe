"""Each CPU policy on the 4-node guest (2 sockets, 2 cores per socket, 2 threads per core,
one core per NUMA node), through the relay on containerd 1.6 and 2.1.9 and as the NRI plugin
on 2.1.9, judged by the kernel's own files on cgroup v2: a Guaranteed container's exclusive
CPUs and memory nodes in cpuset.cpus.effective / cpuset.mems.effective and /proc/PID/status,
the shared container moved off them by an unsolicited update, and after a kill -9 and
restart of the front end nothing lost or double-booked and no container restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import POD_NAME, Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.vm.guest import cgv2
from tests.vm.guest.conftest import kubelet_for
from tests.vm.guest.frontends import COMBINATIONS, FrontEnd

pytestmark = pytest.mark.topologies("4node")

RESERVED = CPUSet([0])  # ReservedResources CPU: 1 takes the machine's first CPU
CONFIGS = {
    "static": "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n",
    "static-plus": "policy:\n  Active: static-plus\n  ReservedResources:\n    CPU: 1\n",
    "topology-aware": "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 1\n",
    # Guaranteed containers of the default namespace each in a balloon of their own; the
    # shared container (namespace "other") in the default balloon.
    "balloons": ("policy:\n  Active: balloons\n  ReservedResources:\n    CPU: 1\n  balloons:\n    BalloonTypes:\n"
                 "      - Name: dedicated\n        Namespaces: [default]\n        PreferNewBalloons: true\n"),
}


def besteffort(name: str) -> PodSpec:
    return PodSpec(name=name, namespace="other", containers=[ContainerSpec(name="c")])


def guaranteed(name: str, cpu: str = "2", memory: str = "64Mi") -> PodSpec:
    res = {"cpu": cpu, "memory": memory}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def check_exclusive(p: cgv2.Placement, count: int) -> None:
    """What every policy promises a Guaranteed container of `count` whole CPUs on this
    machine: that many CPUs, whole cores, within one NUMA node, memory on that node."""
    assert len(p.cpus) == count, p
    assert cgv2.whole_cores(p.cpus), f"not whole cores: {p}"
    assert len(cgv2.node_of(p.cpus)) == 1, f"spans NUMA nodes: {p}"
    assert not p.cpus & RESERVED, f"got the reserved CPU: {p}"
    assert p.mems == cgv2.node_of(p.cpus), f"memory not on the CPUs' node: {p}"
    assert p.allowed_mems == p.mems, p


def wait_exclusive(k: Kubelet, cid: str, count: int) -> cgv2.Placement:
    p = cgv2.wait_for(f"{cid[:12]} on {count} CPUs", lambda: (q := cgv2.placement(k, cid)) and len(q.cpus) == count
                      and q.allowed_cpus == q.cpus and q.allowed_mems == q.mems and q)
    check_exclusive(p, count)
    return p  # type: ignore[no-any-return]


def wait_shared_off(k: Kubelet, cid: str, exclusive: CPUSet, policy: str) -> cgv2.Placement:
    """The shared container runs on none of the exclusive CPUs (the unsolicited update); under
    static on all the others."""
    if policy == "static":
        return cgv2.wait_placement(k, cid, cgv2.online_cpus() - exclusive)
    return cgv2.wait_for(f"{cid[:12]} off {exclusive}",  # type: ignore[no-any-return]
                         lambda: (q := cgv2.placement(k, cid)) and not q.cpus & exclusive
                         and q.allowed_cpus == q.cpus and q)


def pod_id(k: Kubelet, name: str) -> str:
    return k.list_pods(labels={POD_NAME: name})[0].id  # type: ignore[no-any-return]


@pytest.mark.parametrize("policy", list(CONFIGS))
@pytest.mark.parametrize(("kind", "version"), COMBINATIONS, ids=[f"{k}-{v}" for k, v in COMBINATIONS])
def test_exclusive_cpus_and_memory_survive_a_restart(shared_runtime, workdir: Path, kind: str, version: str,
                                                     policy: str) -> None:
    runtime = shared_runtime(version)
    front = FrontEnd(kind, runtime, workdir, CONFIGS[policy]).start()
    k = kubelet_for(front.address, runtime)
    try:
        shared = k.start_pod(besteffort("shared")).container_ids["c"]
        first = k.start_pod(guaranteed("first")).container_ids["c"]
        p1 = wait_exclusive(k, first, 2)
        wait_shared_off(k, shared, p1.cpus, policy)
        pids = cgv2.container_pids(k, [shared, first])

        front.kill()
        front.start()
        second = k.start_pod(guaranteed("second")).container_ids["c"]
        p2 = wait_exclusive(k, second, 2)
        assert not p2.cpus & p1.cpus, f"double-booked after the restart: first {p1}, second {p2}"
        assert cgv2.placement(k, first) == p1, "the first container's placement changed at the restart"
        wait_shared_off(k, shared, p1.cpus | p2.cpus, policy)
        assert cgv2.container_pids(k, [shared, first]) == pids, "a container was restarted"

        k.delete_pod(pod_id(k, "first"))
        if policy == "static":  # the returned CPUs go back to the shared container
            cgv2.wait_placement(k, shared, cgv2.online_cpus() - p2.cpus)
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()
            front.stop()
