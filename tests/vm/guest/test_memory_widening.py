"""topology-aware's memory placement on a node too small for the request (the `memonly`
guest: CPU 0 on node 0 of 1 GiB, CPU 1 on node 1 of 384 MiB, node 2 memory only, 512 MiB):
a Guaranteed container whose memory does not fit its CPU's node keeps its CPU and gets
memory nodes that hold it (widened up the pool tree), judged by cpuset.mems.effective and
Mems_allowed_list; a small one stays on its CPU's node."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.vm.guest import cgv2
from tests.vm.guest.conftest import kubelet_for
from tests.vm.guest.frontends import FrontEnd

pytestmark = pytest.mark.topologies("memonly")

CONFIG = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 1\n"
MiB = 1 << 20


def node_memory(node: int) -> int:
    for line in (cgv2.SYS_NODE / f"node{node}" / "meminfo").read_text().splitlines():
        if "MemTotal:" in line:
            return int(line.split()[-2]) * 1024
    raise AssertionError(f"node{node}/meminfo has no MemTotal")


def guaranteed(name: str, memory: str) -> PodSpec:
    res = {"cpu": "1", "memory": memory}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def test_memory_widens_beyond_a_small_node_and_the_cpu_stays(shared_runtime, workdir: Path) -> None:
    nodes = cgv2.node_cpus()
    assert [n for n, c in nodes.items() if not c], f"no memory-only node: {nodes}"
    runtime = shared_runtime("1.6")
    front = FrontEnd("relay", runtime, workdir, CONFIG).start()
    k = kubelet_for(front.address, runtime)
    try:
        small = k.start_pod(guaranteed("small", "64Mi")).container_ids["c"]
        ps = cgv2.wait_for("small's exclusive CPU", lambda: (q := cgv2.placement(k, small)) and len(q.cpus) == 1
                           and q.cpus == q.allowed_cpus and q.mems == q.allowed_mems and q)
        assert ps.cpus == CPUSet([1]), ps  # CPU 0 is reserved
        assert cgv2.node_of(ps.cpus) <= ps.mems, f"memory not on the CPU's node: {ps}"
        k.delete_pod(k.list_pods()[0].id)

        big_request = node_memory(1) + 128 * MiB  # more than node 1 holds
        big = k.start_pod(guaranteed("big", f"{big_request // MiB}Mi")).container_ids["c"]
        pb = cgv2.wait_for("big's exclusive CPU", lambda: (q := cgv2.placement(k, big)) and len(q.cpus) == 1
                           and q.cpus == q.allowed_cpus and q.mems == q.allowed_mems and q)
        assert pb.cpus == CPUSet([1]), f"the CPU did not stay tight: {pb}"
        assert cgv2.node_of(pb.cpus) <= pb.mems, pb
        assert sum(node_memory(n) for n in pb.mems) >= big_request, \
            f"memory nodes {pb.mems} do not hold {big_request // MiB} MiB: {pb}"
        assert len(pb.mems) > len(ps.mems), f"not widened: small {ps}, big {pb}"
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()
            front.stop()
