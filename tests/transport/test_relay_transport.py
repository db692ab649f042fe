"""The relay's transport against an in-process runtime double: what containerd can't show."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time

import grpc
import pytest
from fake_runtime import SMALL_WINDOWS, FakeRuntime

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport import sockets
from cri_resmgr.transport.framerelay.limits import Limits
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.grpcrelay import GrpcRelay as Relay
from cri_resmgr.transport.methods import MethodTable
from cri_resmgr.transport.upstream import Upstream
from tests.harness.loop import LoopThread

V1 = "/runtime.v1.RuntimeService/"
V1A2 = "/runtime.v1alpha2.RuntimeService/"


class Setup:
    def __init__(self, tmp_path, interceptors=None, image=True, transport="h2", limits=None, timed=False):
        self.dir = tmp_path
        self.transport = transport
        self.loop = LoopThread()
        self.runtime_sock = str(tmp_path / "runtime.sock")
        self.relay_sock = str(tmp_path / "run" / "relay.sock")
        self.fake = FakeRuntime(self.runtime_sock)
        self.loop.run(self.fake.start())
        self.interceptors = interceptors or {}
        self.image = image
        self.limits = limits or Limits()
        self.timed = timed
        self.relay = None
        self.start_relay()
        self.channel = grpc.insecure_channel("unix://" + self.relay_sock, options=[
            ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
            *SMALL_WINDOWS])

    def start_relay(self):
        async def make():
            up = Upstream(self.runtime_sock)
            if self.transport == "h2":
                relay = FrameRelay(self.relay_sock, self.runtime_sock, MethodTable(), interceptors=self.interceptors,
                                   socket_like=self.runtime_sock, image_enabled=self.image, limits=self.limits,
                                   timed=self.timed)
            else:
                relay = Relay(self.relay_sock, up, up if self.image else None, MethodTable(),
                              interceptors=self.interceptors, socket_like=self.runtime_sock, timed=self.timed)
            await relay.start()
            return relay
        self.relay = self.loop.run(make())

    def call(self, path, data=b"", **kw):
        return self.channel.unary_unary(path)(data, **kw)

    def close(self):
        self.channel.close()
        if self.relay:
            self.loop.run(self.relay.stop(1))
        self.loop.run(self.fake.stop())
        self.loop.close()


@pytest.fixture(params=["h2", "grpc"])
def transport(request):
    return request.param


@pytest.fixture
def setup(tmp_path, transport):
    s = Setup(tmp_path, transport=transport)
    yield s
    s.close()


def test_unknown_method_relayed_as_raw_bytes_with_trailing_metadata(setup):
    reply, call = setup.channel.unary_unary("/example.Future/Thing").with_call(b"\x00\x01payload")
    assert reply == b"\x00\x01payload"
    assert ("x-echo-len", "9") in call.trailing_metadata()


def test_unknown_client_streaming_method_relays_every_message(setup):
    reply = setup.channel.stream_unary("/test.Sum/Total")(iter([b"ab", b"cde", b"f"]))
    assert reply == b"6"


def test_upstream_error_keeps_code_details_and_trailers(setup):
    with pytest.raises(grpc.RpcError) as e:
        setup.call(V1 + "ContainerStatus", pb.ContainerStatusRequest(container_id="abc").SerializeToString())
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == 'container "abc" not found'
    assert ("x-reason", "gone") in e.value.trailing_metadata()


def test_unimplemented_from_runtime_comes_back_unchanged(setup):
    with pytest.raises(grpc.RpcError) as e:
        setup.call(V1 + "UnknownFutureMethod")
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_request_metadata_and_deadline_reach_runtime(setup):
    reply = setup.call(V1 + "Version", pb.VersionRequest().SerializeToString(),
                       metadata=(("x-trace", "t-123"),), timeout=7.0)
    assert pb.VersionResponse.FromString(reply).runtime_name == "fake"
    assert setup.fake.seen_metadata.get("x-trace") == "t-123"
    # Without propagation the runtime would see no deadline (None); gRPC rounds
    # the timeout up on the wire, hence the small slack.
    assert setup.fake.seen_remaining is not None and 0 < setup.fake.seen_remaining <= 7.5


def test_caller_cancellation_reaches_runtime(setup):
    fut = setup.channel.unary_unary(V1 + "StopContainer").future(b"")
    time.sleep(0.3)
    fut.cancel()
    setup.loop.run(_wait_event(setup.fake.cancelled, 5))


def test_caller_deadline_expires_as_deadline_exceeded(setup):
    with pytest.raises(grpc.RpcError) as e:
        setup.call(V1 + "StopContainer", b"", timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def _wait_event(event, timeout):
    import asyncio
    await asyncio.wait_for(event.wait(), timeout)


def test_server_streaming_streams_through(setup):
    stream = setup.channel.unary_stream(V1 + "GetContainerEvents")(pb.GetEventsRequest().SerializeToString())
    ids = [pb.ContainerEventResponse.FromString(m).container_id for m in stream]
    assert ids == ["c0", "c1", "c2"]


def test_large_messages_both_directions(setup):
    # ~12 MB each way: over gRPC's 4 MiB default, under kubelet's 16 MiB.
    payload = b"x" * (12 << 20)
    assert setup.call("/example.Big/Echo", payload) == payload
    reply = setup.call("/test.Big/List", b"11000")
    assert len(pb.ListContainersResponse.FromString(reply).containers) == 11000


def test_intercepted_call_is_decoded_and_rewritten_for_both_versions(tmp_path, transport):
    seen = []

    async def create(req):
        seen.append(req.path)
        msg = req.message
        msg.config.linux.resources.cpuset_cpus = "0"
        return await req.forward(msg)

    s = Setup(tmp_path, interceptors={"CreateContainer": create}, transport=transport)
    try:
        request = pb.CreateContainerRequest(pod_sandbox_id="pod1")
        for prefix in (V1, V1A2):
            reply = s.call(prefix + "CreateContainer", request.SerializeToString())
            # The fake echoes the request it got: the rewrite reached the runtime.
            echoed = pb.CreateContainerRequest.FromString(reply)
            assert echoed.pod_sandbox_id == "pod1"
            assert echoed.config.linux.resources.cpuset_cpus == "0"
        assert seen == [V1 + "CreateContainer", V1A2 + "CreateContainer"]
    finally:
        s.close()


def test_disabled_image_service_answers_unimplemented(tmp_path, transport):
    s = Setup(tmp_path, image=False, transport=transport)
    try:
        with pytest.raises(grpc.RpcError) as e:
            s.call("/runtime.v1.ImageService/ListImages")
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert s.call(V1 + "Status") == b""  # runtime service still relayed
    finally:
        s.close()


def test_socket_modes_and_ownership(setup):
    st = os.stat(setup.relay_sock)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660
    rt = os.stat(setup.runtime_sock)
    assert (st.st_uid, st.st_gid) == (rt.st_uid, rt.st_gid)
    assert stat.S_IMODE(os.stat(os.path.dirname(setup.relay_sock)).st_mode) == 0o711


def test_live_socket_is_refused_and_stale_socket_replaced(setup, tmp_path):
    with pytest.raises(sockets.SocketError, match="already running"):
        sockets.prepare(setup.relay_sock)
    stale = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()  # bound, never listening: a leftover from a killed process
    sockets.prepare(stale)
    assert not os.path.exists(stale)
    regular = tmp_path / "file.sock"
    regular.write_text("")
    with pytest.raises(sockets.SocketError, match="not a socket"):
        sockets.prepare(str(regular))


def test_stop_removes_socket_and_finishes_in_flight_calls(tmp_path, transport):
    s = Setup(tmp_path, transport=transport)
    try:
        result = {}

        def slow():
            try:
                s.call(V1 + "Version", b"", timeout=5)
                result["ok"] = True
            except grpc.RpcError as e:
                result["err"] = e.code()

        t = threading.Thread(target=slow)
        t.start()
        t.join()
        s.loop.run(s.relay.stop(2))
        s.relay = None
        assert result == {"ok": True}
        assert not os.path.exists(s.relay_sock)
    finally:
        s.close()


def test_stop_lets_a_call_in_flight_finish(tmp_path, transport):
    s = Setup(tmp_path, transport=transport)
    try:
        fut = s.channel.unary_unary("/test.Slow/Half").future(b"slow", timeout=10)
        time.sleep(0.2)
        s.loop.run(s.relay.stop(5))
        s.relay = None
        assert fut.result() == b"slow"
        assert not os.path.exists(s.relay_sock)
    finally:
        s.close()


def test_runtime_down_is_unavailable_then_recovers(tmp_path, transport):
    s = Setup(tmp_path, transport=transport)
    try:
        assert s.call(V1 + "Version", b"")
        s.loop.run(s.fake.stop())
        with pytest.raises(grpc.RpcError) as e:
            s.call(V1 + "Version", b"", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        s.fake = FakeRuntime(s.runtime_sock)
        sockets.remove(s.runtime_sock)
        s.loop.run(s.fake.start())
        deadline = time.monotonic() + 10
        while True:
            try:
                s.call(V1 + "Version", b"", timeout=2)
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline, "relay did not recover after the runtime came back"
                time.sleep(0.1)
    finally:
        s.close()


def test_runtime_restart_is_logged_once_lost_and_once_back(setup, caplog):
    """However many calls fail while the runtime is away, the log says it once each way."""
    import logging

    caplog.set_level(logging.INFO, logger="cri_resmgr.transport")

    def calls_ok(n: int = 4) -> bool:
        ok = True
        for _ in range(n):
            try:
                setup.call(V1 + "Version", b"", timeout=5)
            except grpc.RpcError:
                ok = False
        return ok

    assert calls_ok()
    setup.loop.run(setup.fake.stop())
    for _ in range(3):
        assert not calls_ok()
        time.sleep(0.3)  # the channel's reconnect attempts fail too
    setup.fake = FakeRuntime(setup.runtime_sock)
    setup.loop.run(setup.fake.start())
    deadline = time.monotonic() + 20
    while not calls_ok():
        assert time.monotonic() < deadline, "calls never got through to the restarted runtime"
        time.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("cri_resmgr.transport")
             and r.levelno >= logging.INFO and "runtime at" in r.getMessage()]
    assert len([m for m in lines if " lost" in m]) == 1, lines
    assert len([m for m in lines if m.endswith("is back")]) == 1, lines
