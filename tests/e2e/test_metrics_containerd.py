"""/metrics of the relay process with the static policy on the real containerd,
parsed with prometheus_client's own parser: every family documented in
docs/metrics.md is there, with the values this node and these pods give."""

from __future__ import annotations

import socket
import time
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.topology import discover
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) < 2, reason="needs at least 2 online CPUs")
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"

FAMILIES = {  # name as the parser gives it (counters without _total) -> type
    "cri_resmgr_build_info": "gauge",
    "cri_resmgr_runtime_up": "gauge",
    "cri_resmgr_relay_call_duration_seconds": "histogram",
    "cri_resmgr_runtime_errors": "counter",
    "cri_resmgr_policy_decision_duration_seconds": "histogram",
    "cri_resmgr_policy_decisions": "counter",
    "cri_resmgr_exclusive_cpus_denied": "counter",
    "cri_resmgr_requests_not_met": "counter",
    "cri_resmgr_pool_cpus": "gauge",
    "cri_resmgr_pool_exclusive_cpus": "gauge",
    "cri_resmgr_pool_shared_cpus": "gauge",
    "cri_resmgr_pool_containers": "gauge",
    "cri_resmgr_exclusive_free_cpus": "gauge",
    "cri_resmgr_container_exclusive_cpus": "gauge",
    "cri_resmgr_container_exclusive_cpus_unlisted": "gauge",
    "cri_resmgr_reconcile_runs": "counter",
    "cri_resmgr_reconcile_failures": "counter",
    "cri_resmgr_reconcile_fixed_containers": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_cpu_seconds": "counter",
    "python_info": "gauge",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, object]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(family, **labels) -> float:
    [v] = [s.value for s in family.samples if s.name == family.name or s.name == family.name + "_total"
           if all(s.labels.get(k) == v for k, v in labels.items())]
    return v


def test_metrics_parse_and_every_family_is_there(containerd, cgroup_root, tmp_path):
    port = _free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(STATIC)
    relay = RelayProcess(tmp_path, str(containerd.socket),
                         ["-force-config", str(cfg), "-metrics-address", f"127.0.0.1:{port}",
                          "-reconcile-period", "1"]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            k.start_pod(PodSpec(name="m-shared", containers=[ContainerSpec(name="c")]))
            res = {"cpu": "1", "memory": "32Mi"}
            k.start_pod(PodSpec(name="m-excl", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
            for _ in range(3):  # passed through: not in the static policy's interception table
                k.channel.unary_unary("/runtime.v1.RuntimeService/Version")(
                    pb.VersionRequest().SerializeToString())
            with pytest.raises(grpc.RpcError):  # the runtime's NOT_FOUND, counted by code
                k.channel.unary_unary("/runtime.v1.RuntimeService/ContainerStatus")(
                    pb.ContainerStatusRequest(container_id="no-such").SerializeToString())
            deadline = time.monotonic() + 10
            while True:  # a reconcile has run (period 1 s)
                fams = _scrape(port)
                if _value(fams["cri_resmgr_reconcile_runs"]) >= 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            k.delete_all_pods()
    finally:
        relay.stop()

    for name, kind in FAMILIES.items():
        assert name in fams, f"{name} missing; have {sorted(fams)}"
        assert fams[name].type == kind, (name, fams[name].type)
    assert _value(fams["cri_resmgr_runtime_up"]) == 1
    assert _value(fams["cri_resmgr_reconcile_runs"]) >= 1
    calls = fams["cri_resmgr_relay_call_duration_seconds"]
    counts = {(s.labels["method"], s.labels["handling"]): s.value for s in calls.samples if s.name.endswith("_count")}
    assert counts[("CreateContainer", "intercepted")] == 2
    assert counts[("StartContainer", "intercepted")] == 2
    assert counts[("Version", "passthrough")] >= 3
    inf = [s for s in calls.samples if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"
           and s.labels["method"] == "CreateContainer"]
    assert inf[0].value == 2
    assert _value(fams["cri_resmgr_runtime_errors"], method="ContainerStatus", code="NOT_FOUND") == 1
    decisions = fams["cri_resmgr_policy_decision_duration_seconds"]
    assert [s.value for s in decisions.samples if s.name.endswith("_count")] == [2]
    # 1 reserved CPU; the guaranteed container holds one exclusive CPU of the shared pool.
    pool = fams["cri_resmgr_pool_cpus"]
    assert _value(pool, pool="reserved") == 1 and _value(pool, pool="shared") == len(ONLINE)
    assert _value(fams["cri_resmgr_pool_exclusive_cpus"], pool="shared") == 1
    assert _value(fams["cri_resmgr_pool_shared_cpus"], pool="shared") == len(ONLINE) - 1
    assert _value(fams["cri_resmgr_container_exclusive_cpus"], pod="m-excl", container="c") == 1
    assert sum(s.value for s in fams["cri_resmgr_exclusive_free_cpus"].samples) == max(0, len(ONLINE) - 3)
    assert _value(fams["cri_resmgr_build_info"]) == 1


def test_runtime_up_and_readyz_follow_the_runtime_with_no_calls_passing(make_containerd, tmp_path):
    """Issue 29: with containerd stopped and no call through the relay (the none policy, nothing
    connected), cri_resmgr_runtime_up stayed 1 while /readyz said 503. The relay's own probe
    (every 5 s) now sets it, down and back up."""
    ctd = make_containerd()
    port = _free_port()
    relay = RelayProcess(tmp_path / "r", str(ctd.socket), ["-metrics-address", f"127.0.0.1:{port}"]).start()
    try:
        assert _value(_scrape(port)["cri_resmgr_runtime_up"]) == 1
        ctd.stop_daemon()
        deadline = time.monotonic() + 30
        while _value(_scrape(port)["cri_resmgr_runtime_up"]) != 0:
            assert time.monotonic() < deadline, "runtime_up still 1 with containerd stopped:\n" + relay.log()
            time.sleep(0.5)
        assert "lost" in relay.log()
        ctd.start()
        deadline = time.monotonic() + 30
        while _value(_scrape(port)["cri_resmgr_runtime_up"]) != 1:
            assert time.monotonic() < deadline, "runtime_up still 0 with containerd back:\n" + relay.log()
            time.sleep(0.5)
        assert "is back" in relay.log()
    finally:
        relay.stop()
