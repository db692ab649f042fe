"""`cri-resmgr replay` takes replies as big as kubelet does (16 MiB), as the relay's legs
do: a recorded 6 MiB ListContainers reply replays; one over 16 MiB fails as kubelet's
would (RESOURCE_EXHAUSTED), reported, not raised."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.simulate.calls import Call
from cri_resmgr.simulate.replay import replay


def _big_reply(size: int) -> bytes:
    reply = pb.ListContainersResponse()
    n = 0
    while reply.ByteSize() < size:
        c = reply.containers.add(id=f"{n:064x}", pod_sandbox_id="p" * 64)
        c.labels["big"] = "x" * 60000
        n += 1
    return reply.SerializeToString()


@pytest.fixture
def runtime(tmp_path):
    sizes: dict[str, int] = {"list": 0}

    def version(request: bytes, context: grpc.ServicerContext) -> bytes:
        return pb.VersionResponse(runtime_name="fake").SerializeToString()

    def list_containers(request: bytes, context: grpc.ServicerContext) -> bytes:
        return _big_reply(sizes["list"])

    handler = grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", {
        "Version": grpc.unary_unary_rpc_method_handler(version),
        "ListContainers": grpc.unary_unary_rpc_method_handler(list_containers),
    })
    server = grpc.server(futures.ThreadPoolExecutor(2), options=[("grpc.max_send_message_length", 64 << 20)])
    server.add_generic_rpc_handlers((handler,))
    sock = tmp_path / "rt.sock"
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    yield str(sock), sizes
    server.stop(0)


def _call() -> Call:
    return Call("ListContainers", pb.ListContainersRequest(), pb.ListContainersResponse(), "dump.jsonl:1")


def test_a_6_mib_reply_replays(runtime):
    sock, sizes = runtime
    sizes["list"] = 6 << 20
    result = replay([_call()], sock, timeout=30)
    assert [(r.code, r.details) for r in result.replayed] == [("OK", "")]


def test_a_reply_over_kubelets_16_mib_fails_as_kubelets_would(runtime):
    sock, sizes = runtime
    sizes["list"] = 17 << 20
    result = replay([_call()], sock, timeout=30)
    assert [r.code for r in result.replayed] == ["RESOURCE_EXHAUSTED"]
