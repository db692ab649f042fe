"""The kubelet driver's 1.36 mode (tests/harness/kubelet.py) against the runtime double,
through the relay with either transport: what CI's kubelet-1.36 tests rely on it doing."""

from __future__ import annotations

import grpc
import pytest
from test_relay_transport import Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from tests.harness.kubelet import Kubelet


@pytest.fixture(params=["h2", "grpc"])
def setup(request, tmp_path):
    s = Setup(tmp_path, transport=request.param)
    yield s
    s.close()


def _containers(*ids: str) -> bytes:
    return pb.StreamContainersResponse(containers=[pb.Container(id=i) for i in ids]).SerializeToString()


def test_it_reads_the_cgroup_driver_at_start_and_lists_every_streamed_message(setup):
    setup.fake.runtime_config = pb.RuntimeConfigResponse(
        linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CgroupDriver.SYSTEMD))
    setup.fake.streamed["StreamContainers"] = [_containers("a", "b"), _containers(), _containers("c")]
    setup.fake.streamed["StreamPodSandboxes"] = [
        pb.StreamPodSandboxesResponse(pod_sandboxes=[pb.PodSandbox(id="p")]).SerializeToString()]
    k = Kubelet("unix://" + setup.relay_sock, kubelet_version="1.36")
    try:
        assert (k.cgroup_driver, k.cgroup_driver_from) == ("systemd", "runtime")
        assert k.streams_lists is None  # nothing listed yet
        assert [c.id for c in k.list_containers(sandbox_id="p")] == ["a", "b", "c"]
        assert pb.StreamContainersRequest.FromString(setup.fake.requests["/runtime.v1.RuntimeService/StreamContainers"]) \
            == pb.StreamContainersRequest(filter=pb.ContainerFilter(pod_sandbox_id="p"))
        assert [p.id for p in k.list_pods()] == ["p"]
        assert k.streams_lists is True
    finally:
        k.close()


def test_a_failed_stream_raises_and_streaming_goes_on(setup):
    setup.fake.streamed["StreamContainers"] = [_containers("a"), _containers("b")]
    setup.fake.stream_fails = 1
    k = Kubelet("unix://" + setup.relay_sock, kubelet_version="1.36")
    try:
        with pytest.raises(grpc.RpcError) as e:
            k.list_containers()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # the partial list is dropped
        setup.fake.stream_fails = None
        assert [c.id for c in k.list_containers()] == ["a", "b"]
    finally:
        k.close()


def test_unimplemented_falls_back_for_good_and_an_old_runtime_config_keeps_its_own(setup):
    setup.fake.streaming = False
    setup.fake.runtime_config = None
    k = Kubelet("unix://" + setup.relay_sock, kubelet_version="1.36")
    try:
        assert (k.cgroup_driver, k.cgroup_driver_from) == ("cgroupfs", "config")
        k.list_pods()  # the double echoes ListPodSandbox's request: an empty list
        assert k.streams_lists is False
        setup.fake.streaming = True  # List* all the same, until kubelet restarts
        setup.fake.requests.clear()
        k.list_containers()
        assert set(setup.fake.requests) == {"/runtime.v1.RuntimeService/ListContainers"}
    finally:
        k.close()


def test_an_older_kubelet_makes_none_of_these_calls(setup):
    setup.fake.streamed["StreamContainers"] = [_containers("streamed")]
    k = Kubelet("unix://" + setup.relay_sock)
    try:
        k.list_containers()
        assert "/runtime.v1.RuntimeService/RuntimeConfig" not in setup.fake.requests
        assert "/runtime.v1.RuntimeService/StreamContainers" not in setup.fake.requests
        assert (k.cgroup_driver, k.cgroup_driver_from, k.streams_lists) == ("cgroupfs", "config", False)
    finally:
        k.close()
