"""In-place resize through the relay, as kubelet does it (CPU manager `none`): an
UpdateContainerResources with the new shares and quota, no annotation change. The
static policy on this 2-CPU machine with one reserved CPU; the truth is the real
cgroup files and /proc/PID/status."""

from __future__ import annotations

import grpc
import pytest
from test_policy_containerd import (
    ALL,
    EXCLUSIVE,
    ONLINE,
    RESERVED,
    _config,
    besteffort,
    guaranteed,
    wait_cpuset,
    wait_state,
)
from test_policy_containerd import workdir as workdir  # noqa: F401 (fixture)

from tests.harness.kubelet import Kubelet
from tests.harness.podspec import LinuxResources, milli_cpu_to_quota, milli_cpu_to_shares
from tests.harness.relayproc import RelayProcess

pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
MEMORY = 32 << 20


def resized(milli: int) -> LinuxResources:
    """What kubelet sends for a Guaranteed container resized to `milli` CPU."""
    return LinuxResources(cpu_shares=milli_cpu_to_shares(milli), cpu_quota=milli_cpu_to_quota(milli),
                          cpu_period=100000, memory_limit_in_bytes=MEMORY, oom_score_adj=-997)


def wait_saved_request(relay: RelayProcess, cid: str, milli: int) -> None:
    """The state file (saved shortly after a change) records the new size."""
    wait_state(relay, lambda s: [c["workload"]["cpu_request"] for c in s["containers"].values()
                                 if c["id"] == cid] == [milli])


def test_resize_crosses_between_shared_and_exclusive_and_refuses_what_cannot_fit(containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        be = k.start_pod(besteffort("be")).container_ids["c"]
        g = k.start_pod(guaranteed("g", cpu="1500m")).container_ids["c"]
        wait_cpuset(k, g, ALL)  # 1500m: shared
        wait_cpuset(k, be, ALL)

        k.update_container_resources(g, resized(1000))  # to 1 CPU: exclusive
        wait_cpuset(k, g, EXCLUSIVE)
        wait_cpuset(k, be, RESERVED)  # the BestEffort container left it
        files = k.cgroup_files(g)
        assert files.read("cpu", "cpu.cfs_quota_us") == "100000"  # kubelet's own fields went through
        wait_saved_request(relay, g, 1000)

        k.update_container_resources(g, resized(500))  # to 500m: shared again
        wait_cpuset(k, g, ALL)
        wait_cpuset(k, be, ALL)
        wait_saved_request(relay, g, 500)

        k.update_container_resources(g, resized(1000))
        wait_cpuset(k, g, EXCLUSIVE)
        with pytest.raises(grpc.RpcError) as e:  # to 2 CPUs: one is reserved
            k.update_container_resources(g, resized(2000))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "default/g:c" in e.value.details() and "2000m" in e.value.details()
        assert files.read("cpu", "cpu.cfs_quota_us") == "100000"  # nothing reached the runtime
        wait_cpuset(k, g, EXCLUSIVE)  # nothing moved
        wait_cpuset(k, be, RESERVED)
        wait_saved_request(relay, g, 1000)
        assert "cannot resize default/g:c" in relay.log()
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
