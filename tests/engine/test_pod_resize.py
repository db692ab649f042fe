"""A pod-level resize (KEP-5419) through the relay, as kubelet 1.36 sends it: the
container that takes its size from the pod (pod-level resources, no request of its
own) is resized by UpdatePodSandboxResources, before the runtime hears of it; a size
that cannot be met is refused with the reason and nothing moves; the runtime's
UNIMPLEMENTED (containerd 1.6, 1.7) passes to kubelet with the decision kept; any other
refusal of the runtime, or kubelet's revert after a failed step, gives the old size
back. The static policy on 8 CPUs of which 2 reserved; the CRI double."""

from __future__ import annotations

import threading

import grpc
import pytest
from test_engine_fake_runtime import STATIC, besteffort

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.podspec import ContainerSpec, PodSpec

SHAPE = dict(sockets=1, cores_per_die=4, threads_per_core=2)
MEM = "64Mi"


def pod_level(name: str, cpu: str, sidecar: str | None = None) -> PodSpec:
    """A Guaranteed pod with pod-level resources and a container without any of its
    own (and, given `sidecar`, one with its own request of that size)."""
    containers = [ContainerSpec(name="c")]
    if sidecar:
        containers.append(ContainerSpec(name="side", requests={"cpu": sidecar}))
    return PodSpec(name=name, containers=containers,
                   resources={"requests": {"cpu": cpu, "memory": MEM}, "limits": {"cpu": cpu, "memory": MEM}})


def size(cpu: str) -> dict[str, dict[str, str]]:
    return {"requests": {"cpu": cpu, "memory": MEM}, "limits": {"cpu": cpu, "memory": MEM}}


def cpus(e, cid: str) -> CPUSet:
    return CPUSet(e.fake.cpuset(cid))


def started(e, *extra: PodSpec):
    be = e.kubelet.start_pod(besteffort("be")).container_ids["c"]
    handles = [e.kubelet.start_pod(p) for p in extra]
    e.flush()
    return be, handles


def test_a_pod_resize_moves_the_container_that_takes_the_pods_size_both_ways(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    be, (p,) = started(e, pod_level("p", "2"))
    c = p.container_ids["c"]
    assert len(cpus(e, c)) == 2 and cpus(e, be) == CPUSet.parse("0-7") - cpus(e, c)  # the pod's 2 CPUs, exclusive
    first = cpus(e, c)

    calls = e.kubelet.resize_pod(p, size("4"))
    e.flush()
    assert calls == ["UpdatePodSandboxResources", "pod cgroup", "UpdateContainerResources c"]  # growing
    assert [r.pod_sandbox_id for r in e.fake.pod_resizes] == [p.sandbox_id]  # forwarded after the decision
    assert len(cpus(e, c)) == 4 and first <= cpus(e, c)  # the 2 it had and 2 more
    assert cpus(e, be) == CPUSet.parse("0-7") - cpus(e, c)
    # kubelet's own UpdateContainerResources of c (minimum shares: no size of its own) left it so.
    assert e.ctl.active_policy().resources(_key(e, c)).cpuset_cpus == cpus(e, c)

    calls = e.kubelet.resize_pod(p, size("1"))
    e.flush()
    assert calls == ["pod cgroup", "UpdatePodSandboxResources", "UpdateContainerResources c"]  # shrinking
    assert len(cpus(e, c)) == 1 and cpus(e, be) == CPUSet.parse("0-7") - cpus(e, c)


def test_a_pod_resize_that_cannot_fit_is_refused_with_the_reason_and_nothing_moves(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    be, (p,) = started(e, pod_level("p", "2"))
    c = p.container_ids["c"]
    before = (cpus(e, c), cpus(e, be))
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.resize_pod(p, size("7"))  # 6 CPUs can be exclusive
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "cannot resize default/p:c" in err.value.details() and "7000m" in err.value.details()
    e.flush()
    assert e.fake.pod_resizes == []  # the runtime never heard of it
    assert (cpus(e, c), cpus(e, be)) == before
    assert p.spec.resources == size("2")  # kubelet keeps the old size


def test_the_runtimes_unimplemented_reaches_kubelet_and_the_decision_stands(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    be, (p,) = started(e, pod_level("p", "2"))
    c = p.container_ids["c"]
    e.fake.pod_resize_code = grpc.StatusCode.UNIMPLEMENTED  # containerd 1.6, 1.7
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.update_pod_sandbox_resources(p.sandbox_id, _sandbox(size("3")))
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # unchanged
    e.flush()
    assert len(cpus(e, c)) == 3  # kubelet 1.36 goes on, and so does the policy's decision
    calls = e.kubelet.resize_pod(p, size("4"))  # the whole sequence: UNIMPLEMENTED is no failure
    e.flush()
    assert calls[-1] == "UpdateContainerResources c" and len(cpus(e, c)) == 4


def test_a_runtimes_refusal_and_kubelets_revert_give_the_old_size_back(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    be, (p,) = started(e, pod_level("p", "3", sidecar="1"))
    c, side = p.container_ids["c"], p.container_ids["side"]
    assert len(cpus(e, c)) == 2  # the pod's 3 CPUs less the sidecar's own 1
    before = (cpus(e, c), cpus(e, be))

    e.fake.pod_resize_code = grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.resize_pod(p, size("5"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    e.flush()
    assert (cpus(e, c), cpus(e, be)) == before  # the runtime refused: the old size back

    e.fake.pod_resize_code = None
    refused = threading.Event()

    async def gate(req) -> bool:  # kubelet's update of the sidecar fails once
        if req.container_id == side and not refused.is_set():
            refused.set()
            return True
        return False

    e.fake.update_gate = gate
    with pytest.raises(grpc.RpcError):
        calls = e.kubelet.resize_pod(p, size("5"))
    e.flush()
    assert refused.is_set() and len(e.fake.pod_resizes) == 3  # the refused one, the resize, the revert
    assert (cpus(e, c), cpus(e, be)) == before  # kubelet's revert held
    calls = e.kubelet.resize_pod(p, size("5"))
    e.flush()
    assert "revert" not in calls and len(cpus(e, c)) == 4


def test_a_container_resize_in_kubelet_136s_sequence_leaves_a_sibling_without_requests_alone(engine_factory):
    """kubelet sends UpdatePodSandboxResources with the pod's summed resources before its
    containers' updates on every resize: a container without requests of its own in a pod
    without pod-level resources takes nothing from that sum."""
    e = engine_factory(SHAPE, STATIC)
    res = {"cpu": "1", "memory": MEM}
    pod = PodSpec(name="p", containers=[ContainerSpec(name="g", requests=res, limits=res), ContainerSpec(name="be")])
    be, (p,) = started(e, pod)
    g, side = p.container_ids["g"], p.container_ids["be"]
    calls = e.kubelet.resize_pod(p, containers={"g": {"requests": {"cpu": "2", "memory": MEM},
                                                      "limits": {"cpu": "2", "memory": MEM}}})
    e.flush()
    assert calls == ["UpdatePodSandboxResources", "pod cgroup", "UpdateContainerResources g",
                     "UpdateContainerResources be"]
    cache = e.ctl._resmgr.cache
    assert (cache.by_id(g).workload.cpu_request, cache.by_id(side).workload.cpu_request) == (2000, 0)
    assert e.fake.containers[g]["resources"].cpu_shares == 2048  # kubelet's own update went through


def test_a_guaranteed_containers_resize_in_kubelet_136s_sequence(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    res = {"cpu": "1", "memory": MEM}
    be, (p,) = started(e, PodSpec(name="g", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
    c = p.container_ids["c"]
    assert len(cpus(e, c)) == 1
    two = {"requests": {"cpu": "2", "memory": MEM}, "limits": {"cpu": "2", "memory": MEM}}
    assert e.kubelet.resize_pod(p, containers={"c": two}) == [
        "UpdatePodSandboxResources", "pod cgroup", "UpdateContainerResources c"]
    e.flush()
    assert len(cpus(e, c)) == 2 and cpus(e, be) == CPUSet.parse("0-7") - cpus(e, c)
    with pytest.raises(grpc.RpcError) as err:  # 7: 6 can be exclusive; the container's own update is refused
        e.kubelet.resize_pod(p, containers={"c": {"requests": {"cpu": "7", "memory": MEM},
                                                  "limits": {"cpu": "7", "memory": MEM}}})
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    e.flush()
    assert len(cpus(e, c)) == 2 and len(e.fake.pod_resizes) == 3  # the resize, then kubelet's revert
    assert p.spec.containers[0].requests["cpu"] == "2"


def test_two_containers_without_requests_share_the_pod_and_take_no_size(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    pod = PodSpec(name="p", containers=[ContainerSpec(name="a"), ContainerSpec(name="b")], resources=size("2"))
    be, (p,) = started(e, pod)
    shared = CPUSet.parse("0-7")
    assert cpus(e, p.container_ids["a"]) == shared and cpus(e, p.container_ids["b"]) == shared
    e.kubelet.resize_pod(p, size("4"))
    e.flush()
    assert cpus(e, p.container_ids["a"]) == shared and cpus(e, be) == shared  # how they split it is unknown


def _key(e, cid: str) -> str:
    c = e.ctl._resmgr.cache.by_id(cid)
    return c.key


def _sandbox(resources):
    from tests.harness.podspec import PodSpec as P
    from tests.harness.podspec import sandbox_resources
    return sandbox_resources(P(name="x", containers=[ContainerSpec(name="c")], resources=resources))
