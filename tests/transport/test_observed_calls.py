"""Calls whose replies are only read (ReplyObserver: crash detection), and the frame loop
reading whatever way the bytes are split into reads."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from test_relay_transport import V1, Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport.contract import ReplyObserver
from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.connection import Connection
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.methods import MethodTable
from tests.bench.frameloop import call_chunks, connect

# The fake runtime echoes a ListContainers request: this body comes back as the reply
# (and decodes as a ListContainersRequest too, for the gRPC transport).
LISTED = pb.ListContainersResponse(containers=[pb.Container(id="gone", state=pb.CONTAINER_EXITED)]).SerializeToString()


@pytest.fixture(params=["h2", "grpc"])
def transport(request):
    return request.param


def _setup(tmp_path, transport, scan):
    return Setup(tmp_path, interceptors={"ListContainers": ReplyObserver(scan)}, transport=transport)


def test_the_scan_reads_the_reply_and_the_call_is_unchanged(tmp_path, transport):
    seen: list[bytes] = []
    s = _setup(tmp_path, transport, lambda reply: seen.append(bytes(reply)))
    try:
        for _ in range(3):
            assert s.call(V1 + "ListContainers", LISTED) == LISTED
        assert seen == [LISTED] * 3
    finally:
        s.close()


def test_the_status_waits_for_what_the_scan_returns(tmp_path, transport):
    done: list[float] = []

    async def release() -> None:
        await asyncio.sleep(0.3)
        done.append(time.monotonic())

    s = _setup(tmp_path, transport, lambda reply: release())
    try:
        assert s.call(V1 + "ListContainers", LISTED) == LISTED
        assert len(done) == 1  # the call came back only after the work was done
    finally:
        s.close()


def test_a_failing_scan_or_work_does_not_fail_the_call(tmp_path, transport):
    async def fail() -> None:
        raise RuntimeError("the engine's bookkeeping broke")

    def scan(reply):
        if len(calls) % 2 == 0:
            calls.append("raise")
            raise ValueError("scan broke")
        calls.append("awaitable")
        return fail()

    calls: list[str] = []
    s = _setup(tmp_path, transport, scan)
    try:
        for _ in range(4):
            assert s.call(V1 + "ListContainers", LISTED) == LISTED
        assert calls == ["raise", "awaitable"] * 2
    finally:
        s.close()


def test_an_error_reply_is_not_scanned(tmp_path):
    seen: list[bytes] = []
    s = Setup(tmp_path, interceptors={"ContainerStatus": ReplyObserver(lambda r: seen.append(bytes(r)))})
    try:
        with pytest.raises(grpc.RpcError) as e:
            s.call(V1 + "ContainerStatus", pb.ContainerStatusRequest(container_id="abc").SerializeToString())
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert seen == []
    finally:
        s.close()


class _Recorder:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


@pytest.mark.parametrize("method", ["Version", "ListContainers"])
def test_reads_split_anywhere_pass_unchanged_and_are_scanned_whole(method):
    async def run() -> None:
        seen: list[bytes] = []
        observers = {"ListContainers": ReplyObserver(lambda r: seen.append(bytes(r)))}
        conn, _, _, cenc, renc = connect(observers)
        c1, r1, c2 = call_chunks(method, cenc, renc)
        client, runtime = _Recorder(), _Recorder()
        conn.client.transport = client  # type: ignore[assignment]
        conn.runtime.transport = runtime  # type: ignore[assignment]
        sid = 3
        step = max(1, len(r1) // 97)
        for cut in range(0, len(r1) + 1, step):
            a, b, c = (_stream(x, sid) for x in (c1, r1, c2))
            for part in (a[:cut % (len(a) + 1)], a[cut % (len(a) + 1):]):
                conn.from_client(part)
            for part in (b[:cut], b[cut:]):
                conn.from_runtime(part)
            conn.from_client(c)
            assert bytes(runtime.data) == a + c
            assert bytes(client.data) == b
            client.data.clear()
            runtime.data.clear()
            sid += 2
        assert not conn.closed and not conn.open and not conn.streams
        if method == "ListContainers":
            assert len(seen) == len(range(0, len(r1) + 1, step))
            assert all(s == seen[0] and len(s) > 60_000 for s in seen)

    asyncio.run(run())


def _stream(chunk: bytes, sid: int) -> bytes:
    """`chunk` with stream 1 (as call_chunks makes it) renumbered `sid`."""
    out, pos = bytearray(chunk), 0
    while pos + 9 <= len(out):
        if int.from_bytes(out[pos + 5:pos + 9], "big") == 1:
            out[pos + 5:pos + 9] = sid.to_bytes(4, "big")
        pos += 9 + int.from_bytes(out[pos:pos + 3], "big")
    return bytes(out)


def test_a_frame_header_split_from_its_payload_is_not_taken_for_a_new_read():
    async def run() -> None:
        relay = FrameRelay("/tmp/crirm-unused.sock", "/tmp/crirm-unused-rt.sock", MethodTable())
        client, runtime = _Recorder(), _Recorder()

        class Side:
            conn = None
            early = bytearray()
            lost = False

        conn = Connection(relay, client, runtime, Side())  # type: ignore[arg-type]
        conn.from_client(h2.PREFACE + h2.settings_frame(b""))
        ping = h2.frame(h2.PING, 0, 0, b"12345678")
        for byte in ping:  # one byte a read
            conn.from_client(bytes([byte]))
        assert bytes(runtime.data).endswith(ping)
        assert not conn.closed

    asyncio.run(run())


def test_work_outlives_a_client_reset_and_the_held_status_still_goes_out():
    """The engine's release is not cancelled when kubelet gives up on the call, and the
    held trailers still reach the client afterwards: HPACK state is per connection."""
    async def run() -> None:
        gate = asyncio.Event()
        finished: list[bool] = []

        async def release() -> None:
            await gate.wait()
            finished.append(True)

        conn, _, _, cenc, renc = connect({"ListContainers": ReplyObserver(lambda reply: release())})
        client, runtime = _Recorder(), _Recorder()
        conn.client.transport = client  # type: ignore[assignment]
        conn.runtime.transport = runtime  # type: ignore[assignment]
        c1, r1, _ = (_stream(x, 3) for x in call_chunks("ListContainers", cenc, renc))
        conn.from_client(c1)
        conn.from_runtime(r1)
        assert bytes(client.data) != r1 and r1.startswith(bytes(client.data))  # all but the trailers
        conn.from_client(h2.rst_stream(3))
        await asyncio.sleep(0)
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert finished == [True]
        assert bytes(client.data) == r1
        assert not conn.closed and not conn.streams and not conn._ready

    asyncio.run(run())
