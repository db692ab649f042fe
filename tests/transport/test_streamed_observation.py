"""Server-streamed replies read as they pass (StreamObserver: crash detection reading
kubelet 1.36's StreamContainers, KEP-5825), and the calls a newer kubelet makes that
the relay passes through: Stream* answered UNIMPLEMENTED, RuntimeConfig."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from test_relay_transport import V1, Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport.contract import StreamObserver
from cri_resmgr.transport.framerelay.limits import Limits

STREAM = V1 + "StreamContainers"


@pytest.fixture(params=["h2", "grpc"])
def transport(request):
    return request.param


class Reading:
    """A StreamReading that records what it was given; `work`: what complete returns."""

    def __init__(self, log: list, work=None, fail_on: int | None = None):
        self.log = log
        self.messages: list[bytes] = []
        self.work = work
        self.fail_on = fail_on
        log.append(self)
        self.completed = False

    def message(self, data):
        if self.fail_on is not None and len(self.messages) == self.fail_on:
            raise ValueError("the reading broke")
        self.messages.append(bytes(data))

    def complete(self):
        self.completed = True
        return self.work() if self.work is not None else None


def _batch(first: int, n: int, pad: int = 0) -> bytes:
    return pb.StreamContainersResponse(containers=[
        pb.Container(id=f"{i:064d}", state=pb.CONTAINER_RUNNING, labels={"pad": "x" * pad} if pad else {})
        for i in range(first, first + n)]).SerializeToString()


def _setup(tmp_path, transport, readings, limits=None, **kw):
    observer = StreamObserver(lambda: Reading(readings, **kw))
    return Setup(tmp_path, interceptors={"StreamContainers": observer}, transport=transport, limits=limits)


def _stream(s: Setup, **kw):
    return s.channel.unary_stream(STREAM)(pb.StreamContainersRequest().SerializeToString(), **kw)


def test_every_message_is_read_as_it_passes_and_a_whole_stream_is_completed(tmp_path, transport):
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings)
    # Three messages, the second larger than a frame and than the runtime's 64 KiB window.
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 3), _batch(3, 200, pad=1000), _batch(203, 1)]
    try:
        for _ in range(2):
            assert list(_stream(s)) == sent
        assert [r.messages for r in readings] == [sent, sent]
        assert all(r.completed for r in readings)
        assert s.fake.requests[STREAM] == pb.StreamContainersRequest().SerializeToString()
        if transport == "h2":
            assert s.relay.held.used == 0  # nothing of the streams is still held
    finally:
        s.close()


def test_the_stream_is_not_held_back_while_it_is_read(tmp_path, transport):
    """The client has the first message while the runtime has not sent the second."""
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings)
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 2), _batch(2, 2)]
    s.fake.stream_gate = gate = asyncio.Event()
    try:
        replies = _stream(s, timeout=30)
        assert next(replies) == sent[0]
        assert readings[0].messages == [sent[0]] and not readings[0].completed
        s.loop.run(_set(gate))
        assert list(replies) == sent[1:]
        assert readings[0].messages == sent and readings[0].completed
    finally:
        s.close()


def test_the_status_waits_for_the_work_complete_returns(tmp_path, transport):
    done = threading.Event()

    async def release() -> None:
        await asyncio.sleep(0.3)
        done.set()

    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings, work=release)
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 1), _batch(1, 1)]
    try:
        assert list(_stream(s)) == sent
        assert done.is_set()  # the call ended only after the work was done
    finally:
        s.close()


def test_a_stream_the_runtime_fails_midway_is_never_completed(tmp_path, transport):
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings)
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 1), _batch(1, 1), _batch(2, 1)]
    s.fake.stream_fails = 2
    try:
        got = []
        with pytest.raises(grpc.RpcError) as e:
            for m in _stream(s):
                got.append(m)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert e.value.details() == "fake: the runtime lost its listing"
        assert got == sent[:2]
        assert readings[0].messages == sent[:2]
        assert not readings[0].completed
    finally:
        s.close()


def test_a_stream_the_client_cancels_midway_is_never_completed(tmp_path, transport):
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings)
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 1), _batch(1, 1)]
    s.fake.stream_gate = gate = asyncio.Event()
    try:
        replies = _stream(s, timeout=30)
        assert next(replies) == sent[0]
        replies.cancel()
        s.loop.run(asyncio.wait_for(s.fake.stream_cancelled.wait(), 10))
        s.loop.run(_set(gate))
        assert not readings[0].completed
        assert list(_stream(s)) == sent  # the connection goes on
        assert readings[1].completed
    finally:
        s.close()


def test_unimplemented_passes_through_unchanged_and_is_not_completed(tmp_path, transport):
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings)
    s.fake.streaming = False  # as containerd 1.6, 1.7 and 2.1 answer
    direct = grpc.insecure_channel("unix://" + s.runtime_sock)
    try:
        with pytest.raises(grpc.RpcError) as via_relay:
            list(_stream(s))
        with pytest.raises(grpc.RpcError) as from_runtime:
            list(direct.unary_stream(STREAM)(pb.StreamContainersRequest().SerializeToString()))
        assert via_relay.value.code() == from_runtime.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert via_relay.value.details() == from_runtime.value.details()
        assert all(not r.completed and not r.messages for r in readings)
    finally:
        direct.close()
        s.close()


def test_a_reading_that_fails_does_not_fail_the_call_and_is_not_completed(tmp_path, transport):
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings, fail_on=1)
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 1), _batch(1, 1), _batch(2, 1)]
    try:
        assert list(_stream(s)) == sent
        assert readings[0].messages == sent[:1] and not readings[0].completed
    finally:
        s.close()


def test_a_message_beyond_the_held_budget_leaves_the_stream_unread(tmp_path):
    """The frame relay holds a message only while it arrives, within its budget; a
    message that does not fit is passed on unread and the stream is not completed."""
    readings: list[Reading] = []
    s = _setup(tmp_path, "h2", readings, limits=Limits(held_total=100_000))
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 1), _batch(1, 200, pad=1000), _batch(201, 1)]
    try:
        assert list(_stream(s)) == sent
        assert readings[0].messages == sent[:1] and not readings[0].completed
        assert s.relay.held.used == 0
        s.fake.streamed["StreamContainers"] = small = [_batch(0, 1), _batch(1, 50, pad=1000)]
        assert list(_stream(s)) == small
        assert readings[1].messages == small and readings[1].completed
    finally:
        s.close()


def test_a_dumped_stream_is_dumped_and_read(tmp_path):
    """With a dump rule matching it, the frame relay dumps the stream and reads it too."""
    readings: list[Reading] = []
    s = _setup(tmp_path, "h2", readings)
    dumped: list[tuple] = []

    class Sink:
        def wants(self, path):
            return path == STREAM

        def request(self, path, call_id, data):
            dumped.append(("request", data))

        def reply(self, path, call_id, data, latency, code=None, details=""):
            dumped.append(("reply", data, code))

    s.relay.reconfigure(dumper=Sink())
    s.fake.streamed["StreamContainers"] = sent = [_batch(0, 1), _batch(1, 2)]
    try:
        assert list(_stream(s)) == sent
        assert readings[0].messages == sent and readings[0].completed
        assert dumped == [("request", pb.StreamContainersRequest().SerializeToString()),
                          ("reply", sent[0], None), ("reply", sent[1], None), ("reply", None, grpc.StatusCode.OK)]
    finally:
        s.close()


@pytest.mark.parametrize("observed", [False, True])
def test_runtime_config_passes_through_byte_for_byte(tmp_path, transport, observed):
    """kubelet reads its cgroup driver from RuntimeConfig (required from kubelet 1.38):
    neither transport reads or changes it, with or without crash detection."""
    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings) if observed else Setup(tmp_path, transport=transport)
    s.fake.runtime_config = pb.RuntimeConfigResponse(
        linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CgroupDriver.SYSTEMD))
    try:
        want = pb.RuntimeConfigResponse(
            linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CgroupDriver.SYSTEMD)).SerializeToString()
        assert s.call(V1 + "RuntimeConfig", b"") == want
        s.fake.runtime_config = cgroupfs = pb.RuntimeConfigResponse(
            linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CgroupDriver.CGROUPFS))
        assert s.call(V1 + "RuntimeConfig", b"") == cgroupfs.SerializeToString()
        assert s.fake.requests[V1 + "RuntimeConfig"] == b""
    finally:
        s.close()


async def _set(event: asyncio.Event) -> None:
    event.set()


def test_reads_split_anywhere_pass_unchanged_and_every_message_is_read_once():
    """The frame loop fed a StreamContainers reply of messages straddling DATA frames, the
    runtime's bytes cut at every point: each message reaches the reading whole, once."""
    from test_observed_calls import _Recorder, _stream

    from tests.bench.frameloop import call_chunks, connect

    async def run() -> None:
        readings: list[Reading] = []
        conn, _, _, cenc, renc = connect({"StreamContainers": StreamObserver(lambda: Reading(readings))})
        c1, r1, c2 = call_chunks("StreamContainers", cenc, renc, stream_batch=7)
        want = _messages(r1)
        assert len(want) > 10 and len(r1) > 60_000
        client, runtime = _Recorder(), _Recorder()
        conn.client.transport = client  # type: ignore[assignment]
        conn.runtime.transport = runtime  # type: ignore[assignment]
        sid, cuts = 3, range(0, len(r1) + 1, max(1, len(r1) // 97))
        for cut in cuts:
            a, b, c = (_stream(x, sid) for x in (c1, r1, c2))
            conn.from_client(a)
            for part in (b[:cut], b[cut:]):
                conn.from_runtime(part)
            await asyncio.sleep(0)
            conn.from_client(c)
            assert bytes(client.data) == b and bytes(runtime.data) == a + c
            client.data.clear()
            runtime.data.clear()
            sid += 2
        assert not conn.closed and not conn.open and not conn.streams
        assert len(readings) == len(cuts)
        assert all(r.messages == want and r.completed for r in readings)
        assert conn.relay.held.used == 0

    asyncio.run(run())


def _messages(runtime_chunk: bytes) -> list[bytes]:
    """The gRPC messages in the DATA frames of a runtime read (stream 1)."""
    from cri_resmgr.transport.framerelay import frames as h2

    data, pos = bytearray(), 0
    while pos + 9 <= len(runtime_chunk):
        length = int.from_bytes(runtime_chunk[pos:pos + 3], "big")
        if runtime_chunk[pos + 3] == h2.DATA:
            data += runtime_chunk[pos + 9:pos + 9 + length]
        pos += 9 + length
    out = []
    while data:
        size = int.from_bytes(data[1:5], "big")
        out.append(bytes(data[5:5 + size]))
        del data[:5 + size]
    return out


def test_the_frame_loop_bench_runs_observed_streams():
    from tests.bench import frameloop

    result = frameloop.measure(("ListContainers", "StreamContainers"), calls=3,
                               interceptors=frameloop._observers(), stream_batch=1)
    assert set(result) == {"ListContainers", "StreamContainers"}


def test_the_other_streamed_lists_pass_through_unread(tmp_path, transport):
    """StreamPodSandboxes, the stats, metrics and images streams: relayed as they come,
    as their List* calls are, with crash detection's observer in the table."""
    from fake_runtime import STREAMS

    readings: list[Reading] = []
    s = _setup(tmp_path, transport, readings)
    try:
        for path, name in STREAMS.items():
            if name == "StreamContainers":
                continue
            s.fake.streamed[name] = sent = [b"\x0a\x02\x0a\x00" * (i + 1) for i in range(3)]
            assert list(s.channel.unary_stream(path)(b"")) == sent, path
        assert readings == []
    finally:
        s.close()
