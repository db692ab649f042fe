"""What a kubelet 1.36 asks that the containerd releases here do not have, through the
real relay (static policy: StreamContainers is read by crash detection), with both
transports: the Stream* lists (KEP-5825) answered UNIMPLEMENTED pass through as the
runtime gave them, so kubelet falls back to List*; RuntimeConfig passes byte for byte."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import grpc
import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from tests.harness import runtimes
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

RUNTIMES = pytest.mark.parametrize("runtime", ["1.6", runtimes.CONTAINERD_17, runtimes.CONTAINERD_2],
                                   indirect=True, ids=lambda v: f"containerd-{v}")
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
RUNTIME = "/runtime.v1.RuntimeService/"
STREAMS = [RUNTIME + m for m in ("StreamContainers", "StreamPodSandboxes", "StreamContainerStats",
                                 "StreamPodSandboxStats", "StreamPodSandboxMetrics")] \
    + ["/runtime.v1.ImageService/StreamImages"]


@pytest.fixture(params=["h2", "grpc"])
def relay(request, runtime):
    d = Path(tempfile.mkdtemp(prefix="crirm-nk-", dir="/tmp"))
    (d / "config.yaml").write_text(STATIC)
    r = RelayProcess(d, str(runtime.socket), ["-force-config", str(d / "config.yaml"),
                                              "-relay-transport", request.param]).start()
    yield r
    r.stop()
    shutil.rmtree(d, ignore_errors=True)


def _answer(address: str, path: str, streaming: bool) -> tuple:
    """(status code, details, replies) of one call made with an empty request."""
    with grpc.insecure_channel(address) as ch:
        try:
            if streaming:
                return grpc.StatusCode.OK, "", list(ch.unary_stream(path)(b"", timeout=60))
            return grpc.StatusCode.OK, "", [ch.unary_unary(path)(b"", timeout=60)]
        except grpc.RpcError as e:
            return e.code(), e.details(), []


@RUNTIMES
def test_stream_lists_answered_unimplemented_pass_through_unchanged(relay, runtime):
    for path in STREAMS:
        direct = _answer("unix://" + str(runtime.socket), path, streaming=True)
        assert direct[0] == grpc.StatusCode.UNIMPLEMENTED, (path, direct)
        for _ in range(3):
            assert _answer(relay.address, path, streaming=True) == direct, path


@RUNTIMES
def test_runtime_config_passes_through_byte_for_byte(relay, runtime):
    direct = _answer("unix://" + str(runtime.socket), RUNTIME + "RuntimeConfig", streaming=False)
    assert _answer(relay.address, RUNTIME + "RuntimeConfig", streaming=False) == direct


@RUNTIMES
def test_a_kubelet_136_falls_back_to_lists_and_runs_a_pod(relay, runtime):
    direct = _answer("unix://" + str(runtime.socket), RUNTIME + "RuntimeConfig", streaming=False)
    k = Kubelet(relay.address, cgroup_root=f"{runtime.owned_cgroup_roots[0]}/kubepods", kubelet_version="1.36")
    try:
        if direct[0] == grpc.StatusCode.OK:  # the runtime tells its cgroup driver
            told = pb.RuntimeConfigResponse.FromString(direct[2][0]).linux.cgroup_driver
            assert k.cgroup_driver_from == "runtime"
            assert k.cgroup_driver == ("systemd" if told == pb.CgroupDriver.SYSTEMD else "cgroupfs")
        else:
            assert direct[0] == grpc.StatusCode.UNIMPLEMENTED
            assert (k.cgroup_driver, k.cgroup_driver_from) == ("cgroupfs", "config")
        res = {"cpu": "1", "memory": "32Mi"}
        pod = k.start_pod(PodSpec(name="g", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
        assert [c.id for c in k.list_containers(sandbox_id=pod.sandbox_id)] == [pod.container_ids["c"]]
        assert k.streams_lists is False  # UNIMPLEMENTED once: List* from then on
        assert [p.id for p in k.list_pods()] == [pod.sandbox_id]
        k.delete_pod(pod)
    finally:
        k.delete_all_pods()
        k.close()
