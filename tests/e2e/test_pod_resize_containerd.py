"""A pod-level resize (KEP-5419) through the relay, against the real containerd 1.6 and
2.1.9, which answer kubelet's UpdatePodSandboxResources UNIMPLEMENTED: kubelet 1.36 takes
that as done and goes on, and so does the policy's decision for the container that takes
the pod's size (pod-level resources, none of its own). The static policy on this 2-CPU
machine with one reserved CPU; the truth is the container's real cgroup cpuset. (The
runtime's own answers, success and refusal, are the CRI double's: tests/engine/test_pod_resize.py.)"""

from __future__ import annotations

import grpc
import pytest
from test_policy_containerd import ALL, EXCLUSIVE, ONLINE, RESERVED, _config, besteffort, wait_cpuset
from test_policy_containerd import workdir as workdir  # noqa: F401 (fixture)

from tests.harness import runtimes
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec, sandbox_resources
from tests.harness.relayproc import RelayProcess

pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")

BOTH = pytest.mark.parametrize("runtime", ["1.6", runtimes.CONTAINERD_2], indirect=True,
                               ids=["containerd-1.6", f"containerd-{runtimes.CONTAINERD_2}"])
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
MEM = "64Mi"


def size(cpu: str) -> dict[str, dict[str, str]]:
    return {"requests": {"cpu": cpu, "memory": MEM}, "limits": {"cpu": cpu, "memory": MEM}}


@BOTH
def test_a_pod_resize_moves_the_containers_cpus_in_its_cgroup_and_refuses_what_cannot_fit(runtime, workdir):
    relay = RelayProcess(workdir, str(runtime.socket), ["-force-config", str(_config(workdir, STATIC))]).start()
    k = Kubelet(relay.address, cgroup_root=f"{runtime.owned_cgroup_roots[0]}/kubepods")
    try:
        be = k.start_pod(besteffort("be")).container_ids["c"]
        p = k.start_pod(PodSpec(name="p", containers=[ContainerSpec(name="c")], resources=size("1")))
        c = p.container_ids["c"]
        wait_cpuset(k, c, EXCLUSIVE)  # the pod's 1 CPU, exclusive
        wait_cpuset(k, be, RESERVED)

        with pytest.raises(grpc.RpcError) as e:  # the runtime's own answer passes unchanged
            k.update_pod_sandbox_resources(p.sandbox_id, sandbox_resources(PodSpec(
                name="p", containers=[ContainerSpec(name="c")], resources=size("500m"))))
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        wait_cpuset(k, c, ALL)  # and the decision stands: 500m runs shared
        wait_cpuset(k, be, ALL)

        calls = k.resize_pod(p, size("1"))  # kubelet 1.36's sequence: UNIMPLEMENTED is no failure
        assert calls == ["UpdatePodSandboxResources", "pod cgroup", "UpdateContainerResources c"]
        wait_cpuset(k, c, EXCLUSIVE)
        wait_cpuset(k, be, RESERVED)

        with pytest.raises(grpc.RpcError) as e:  # 2 CPUs: one is reserved
            k.resize_pod(p, size("2"))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "cannot resize default/p:c" in e.value.details() and "2000m" in e.value.details()
        assert p.spec.resources == size("1")
        wait_cpuset(k, c, EXCLUSIVE)  # nothing moved
        wait_cpuset(k, be, RESERVED)
        assert "resized to cpu request 500m" in relay.log()
    except BaseException:
        print(relay.log())
        raise
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
