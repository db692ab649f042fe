"""What only the frame transport has to get right: header compression kept in
step, flow control kept balanced when the relay holds, rewrites or answers a
call itself, and a connection that outlives the calls that go wrong on it.

The runtime here is the in-process gRPC double; the same transport is driven
against the real containerd in test_relay_containerd.py and
test_policy_containerd.py.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import grpc
import pytest
from test_relay_transport import V1, Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport.contract import InterceptError
from cri_resmgr.transport.framerelay.relay import FrameRelay, _ClientSide
from cri_resmgr.transport.methods import MethodTable

CREATE = V1 + "CreateContainer"


def _create(pod: str, pad: int = 0) -> bytes:
    req = pb.CreateContainerRequest(pod_sandbox_id=pod)
    if pad:
        req.config.annotations["pad"] = "p" * pad
    return req.SerializeToString()


@pytest.fixture
def make(tmp_path):
    made = []

    def _make(**kw):
        s = Setup(tmp_path, transport="h2", **kw)
        made.append(s)
        return s

    yield _make
    for s in made:
        s.close()


def _connections(s):
    return list(s.relay.connections)


def test_both_ends_are_told_to_stop_using_the_hpack_dynamic_table(make):
    s = make()
    for _ in range(5):
        s.call(V1 + "Version", b"", metadata=(("x-a", "1"),))
    [conn] = _connections(s)
    # Without the SETTINGS rewrite the encoders keep a 4096-byte table, and a
    # held-back or relay-made header block would desynchronise the decoders.
    assert conn.creader.table_empty
    assert conn.rreader.table_empty


def test_refusal_before_forwarding_reaches_client_and_connection_goes_on(make):
    async def refuse(req):
        raise InterceptError(grpc.StatusCode.FAILED_PRECONDITION, "no room for pod " + req.message.pod_sandbox_id)

    s = make(interceptors={"CreateContainer": refuse})
    for i in range(50):
        with pytest.raises(grpc.RpcError) as e:
            s.call(CREATE, _create(f"p{i}", pad=2000), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert e.value.details() == f"no room for pod p{i}"
    assert CREATE not in s.fake.requests  # the runtime never got a body
    # 50 x 2 KB swallowed: without the window credit the client would stall at 64 KiB.
    assert s.call(V1 + "Echo", b"after", timeout=10) == b"after"


def test_error_after_forwarding_replaces_the_runtime_reply(make):
    async def fail_late(req):
        await req.forward(req.message)
        raise InterceptError(grpc.StatusCode.INTERNAL, "bookkeeping failed")

    s = make(interceptors={"CreateContainer": fail_late})
    for i in range(40):
        with pytest.raises(grpc.RpcError) as e:
            s.call(CREATE, _create(f"p{i}", pad=3000), timeout=10)
        assert (e.value.code(), e.value.details()) == (grpc.StatusCode.INTERNAL, "bookkeeping failed")
    assert pb.CreateContainerRequest.FromString(s.fake.requests[CREATE]).pod_sandbox_id == "p39"
    # 40 x 3 KB replies dropped: the runtime got its window back, or it would stall.
    assert s.call(V1 + "Echo", b"x" * 100_000, timeout=10) == b"x" * 100_000


def test_rewrites_that_grow_and_shrink_requests_keep_flow_control_balanced(make):
    async def rewrite(req):
        m = req.message
        if int(m.pod_sandbox_id[1:]) % 2:
            m.config.annotations["pad"] = "g" * 6000  # grows by ~2 KB
        else:
            m.config.ClearField("annotations")  # shrinks by ~4 KB
        return await req.forward(m)

    s = make(interceptors={"CreateContainer": rewrite})
    for i in range(300):  # ~1.2 MB each way: many times every window
        echoed = pb.CreateContainerRequest.FromString(s.call(CREATE, _create(f"p{i}", pad=4000), timeout=10))
        assert echoed.pod_sandbox_id == f"p{i}"
        assert echoed.config.annotations.get("pad", "") == ("g" * 6000 if i % 2 else "")
    assert s.call(V1 + "Echo", b"y" * 200_000, timeout=10) == b"y" * 200_000


def test_rewritten_request_larger_than_the_runtime_stream_window(make):
    async def grow(req):
        req.message.config.annotations["big"] = "b" * 300_000
        return await req.forward(req.message)

    s = make(interceptors={"CreateContainer": grow})
    for i in range(3):
        echoed = pb.CreateContainerRequest.FromString(s.call(CREATE, _create(f"p{i}"), timeout=10))
        assert len(echoed.config.annotations["big"]) == 300_000


def test_interceptor_must_pass_on_the_runtime_reply(make):
    async def invent(req):
        await req.forward(req.message)
        return pb.CreateContainerResponse(container_id="made-up")

    s = make(interceptors={"CreateContainer": invent})
    with pytest.raises(grpc.RpcError) as e:
        s.call(CREATE, _create("p"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INTERNAL
    assert "did not return the runtime's reply" in e.value.details()


def test_runtime_error_on_intercepted_call_keeps_code_details_and_trailers(make):
    seen = []

    async def observe(req):
        try:
            return await req.forward(req.message)
        except grpc.aio.AioRpcError as e:
            seen.append(e.code())
            raise

    s = make(interceptors={"ContainerStatus": observe})
    with pytest.raises(grpc.RpcError) as e:
        s.call(V1 + "ContainerStatus", pb.ContainerStatusRequest(container_id="abc").SerializeToString())
    assert seen == [grpc.StatusCode.NOT_FOUND]
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == 'container "abc" not found'
    assert ("x-reason", "gone") in e.value.trailing_metadata()


def test_client_cancelling_an_intercepted_call_cancels_it_at_the_runtime(make):
    async def passthrough(req):
        return await req.forward(req.message)

    s = make(interceptors={"StopContainer": passthrough})
    fut = s.channel.unary_unary(V1 + "StopContainer").future(
        pb.StopContainerRequest(container_id="c").SerializeToString())
    time.sleep(0.3)
    fut.cancel()
    from test_relay_transport import _wait_event
    s.loop.run(_wait_event(s.fake.cancelled, 5))
    assert s.call(V1 + "Echo", b"still here", timeout=10) == b"still here"


def test_concurrent_intercepted_and_passthrough_calls_do_not_mix(make):
    async def tag(req):
        req.message.config.labels["seen"] = req.message.pod_sandbox_id
        return await req.forward(req.message)

    s = make(interceptors={"CreateContainer": tag})
    errors = []

    def worker(t):
        try:
            for i in range(40):
                pod = f"t{t}-{i}"
                echoed = pb.CreateContainerRequest.FromString(s.call(CREATE, _create(pod, pad=i * 50), timeout=20))
                assert (echoed.pod_sandbox_id, echoed.config.labels["seen"]) == (pod, pod)
                assert s.call(V1 + "Echo", pod.encode(), timeout=20) == pod.encode()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


class _Recorder:
    def __init__(self):
        self.events = []

    def wants(self, path):
        return True

    def request(self, path, call_id, data):
        self.events.append(("req", path.rpartition("/")[2], call_id, bytes(data)))

    def reply(self, path, call_id, data, latency, code=None, details=""):
        self.events.append(("rep", path.rpartition("/")[2], call_id, data, code, details))


def test_dumps_of_passthrough_streamed_failed_and_intercepted_calls(make):
    async def passthrough(req):
        return await req.forward(req.message)

    s = make(interceptors={"CreateContainer": passthrough})
    rec = _Recorder()
    s.relay.reconfigure(dumper=rec)
    s.call(V1 + "Echo", b"hello")
    list(s.channel.unary_stream(V1 + "GetContainerEvents")(b""))
    with pytest.raises(grpc.RpcError):
        s.call(V1 + "ContainerStatus", b"")
    s.call(CREATE, _create("p1"))
    ev = rec.events
    echo = [e for e in ev if e[1] == "Echo"]
    assert echo[0][0::3] == ("req", b"hello") and echo[1][3] == b"hello"
    events = [e for e in ev if e[1] == "GetContainerEvents" and e[0] == "rep"]
    assert [pb.ContainerEventResponse.FromString(e[3]).container_id for e in events[:3]] == ["c0", "c1", "c2"]
    assert events[3][4] == grpc.StatusCode.OK
    status = [e for e in ev if e[1] == "ContainerStatus" and e[0] == "rep"]
    assert status[0][4] == grpc.StatusCode.NOT_FOUND and "not found" in status[0][5]
    create = [e for e in ev if e[1] == "CreateContainer"]
    assert pb.CreateContainerRequest.FromString(create[0][3]).pod_sandbox_id == "p1"
    assert pb.CreateContainerRequest.FromString(create[1][3]).pod_sandbox_id == "p1"  # the echo


def test_unreachable_runtime_answers_unavailable_naming_the_socket(make, tmp_path):
    s = make()
    s.loop.run(s.fake.stop())
    s.channel.close()
    s.channel = grpc.insecure_channel("unix://" + s.relay_sock)
    with pytest.raises(grpc.RpcError) as e:
        s.call(V1 + "Version", b"", timeout=5)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert s.runtime_sock in e.value.details()


def test_runtime_lost_and_back_are_logged_once_each_not_per_connection(make, caplog):
    from fake_runtime import FakeRuntime

    caplog.set_level(logging.INFO, logger="cri_resmgr.transport")
    s = make()
    clients = [grpc.insecure_channel("unix://" + s.relay_sock) for _ in range(4)]

    def call_each() -> list[grpc.StatusCode]:
        codes = []
        for c in clients:
            try:
                c.unary_unary(V1 + "Version")(b"", timeout=5)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        return codes

    try:
        assert call_each() == [grpc.StatusCode.OK] * 4  # four relayed connections
        s.loop.run(s.fake.stop())  # the runtime restarts: every runtime connection closes...
        for _ in range(3):  # ...and the clients' new connections find no runtime, many times
            assert grpc.StatusCode.OK not in call_each()
        s.fake = FakeRuntime(s.runtime_sock)
        s.loop.run(s.fake.start())
        deadline = time.monotonic() + 20
        while call_each() != [grpc.StatusCode.OK] * 4:
            assert time.monotonic() < deadline, "clients never got through to the restarted runtime"
            time.sleep(0.2)
    finally:
        for c in clients:
            c.close()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("cri_resmgr.transport")
             and r.levelno >= logging.INFO and "runtime at" in r.getMessage()]
    assert len([m for m in lines if " lost " in m]) == 1, lines
    assert len([m for m in lines if m.endswith("is back")]) == 1, lines
    assert len(lines) == 2, lines


class _ClosedClient:
    """A client transport that went away while the relay was connecting to the runtime."""

    def is_closing(self) -> bool:
        return True


def test_a_client_gone_while_connecting_leaves_no_runtime_connection(tmp_path):
    async def scenario():
        closed = asyncio.Event()

        async def runtime(reader, writer):
            await reader.read()  # until the relay closes its end
            closed.set()
            writer.close()

        server = await asyncio.start_unix_server(runtime, str(tmp_path / "runtime.sock"))
        relay = FrameRelay(str(tmp_path / "relay.sock"), str(tmp_path / "runtime.sock"), MethodTable())
        side = _ClientSide(relay)
        side.transport = _ClosedClient()
        await side._connect()
        await asyncio.wait_for(closed.wait(), 5)
        assert not relay.connections
        server.close()

    asyncio.run(scenario())


def test_a_client_that_is_not_http2_is_dropped_and_others_are_served(make):
    s = make()
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(s.relay_sock)
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.settimeout(5)
        while raw.recv(4096):  # the runtime's SETTINGS may come first; then the relay closes
            pass
    assert s.call(V1 + "Echo", b"fine", timeout=10) == b"fine"


def test_calls_to_a_disabled_service_give_back_the_window_they_used(make):
    s = make(image=False)
    for _ in range(40):  # 40 x 8 KB refused: the client's window would run out without credit
        with pytest.raises(grpc.RpcError) as e:
            s.call("/runtime.v1.ImageService/PullImage", b"i" * 8000, timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "ImageService is disabled" in e.value.details()
    assert s.call(V1 + "Echo", b"z" * 100_000, timeout=10) == b"z" * 100_000


def test_growing_rewrites_under_concurrent_bulk_traffic(make):
    """Rewrites make the client's idea of the runtime's window larger than it is
    while bulk requests fill it: the relay must never send past the real window."""
    async def grow(req):
        req.message.config.annotations["pad"] = "g" * 20_000
        return await req.forward(req.message)

    s = make(interceptors={"CreateContainer": grow})
    errors = []

    def bulk():
        try:
            for _ in range(20):
                assert s.call(V1 + "Echo", b"B" * 300_000, timeout=20) == b"B" * 300_000
        except Exception as e:  # reported below
            errors.append(e)

    def creates():
        try:
            for i in range(60):
                s.call(CREATE, _create(f"p{i}"), timeout=20)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (bulk, bulk, creates, creates)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_compressed_intercepted_request_is_refused_with_a_reason(make):
    async def passthrough(req):
        return await req.forward(req.message)

    s = make(interceptors={"CreateContainer": passthrough})
    with grpc.insecure_channel("unix://" + s.relay_sock, compression=grpc.Compression.Gzip) as gz:
        with pytest.raises(grpc.RpcError) as e:
            gz.unary_unary(CREATE)(_create("p", pad=5000), timeout=10)
        assert e.value.code() == grpc.StatusCode.INTERNAL
        assert "compressed" in e.value.details()
        # Passthrough calls are not read, so compression is the runtime's business.
        assert gz.unary_unary(V1 + "Echo")(b"q" * 5000, timeout=10) == b"q" * 5000


def test_an_interceptor_sees_the_runtimes_status_even_when_a_reset_follows_it(make):
    """A gRPC server answers a method it does not have before reading the request, then
    resets the stream (containerd 1.6 on kubelet's UpdatePodSandboxResources): the
    interceptor's forward raises that status, not CANCELLED for the reset."""
    path = V1 + "UpdatePodSandboxResources"
    seen: list[grpc.StatusCode] = []

    async def forward(req):
        try:
            return await req.forward(req.message)
        except grpc.aio.AioRpcError as e:
            seen.append(e.code())
            raise

    s = make(interceptors={"UpdatePodSandboxResources": forward})
    s.fake.unimplemented.add(path)
    body = pb.UpdatePodSandboxResourcesRequest(pod_sandbox_id="p" * 64,
                                               resources=pb.LinuxContainerResources(cpu_shares=2048)).SerializeToString()
    for _ in range(30):
        with pytest.raises(grpc.RpcError) as e:
            s.call(path, body, timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert seen == [grpc.StatusCode.UNIMPLEMENTED] * 30
