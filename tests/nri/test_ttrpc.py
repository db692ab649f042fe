"""ttRPC framing, server and client, byte by byte (cri_resmgr/nri/ttrpc.py)."""

from __future__ import annotations

import asyncio

import pytest

from cri_resmgr._proto import nri_ttrpc_pb2 as tpb
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.ttrpc import Code, FrameReader, TtrpcError, encode


class Pipe:
    """A Channel whose reads come from `feed` and whose writes are collected."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[bytes] = asyncio.Queue()
        self.written = bytearray()
        self.peer: Pipe | None = None

    async def read(self) -> bytes:
        return await self.incoming.get()

    def write(self, data: bytes) -> None:
        self.written += data
        if self.peer is not None:
            self.peer.incoming.put_nowait(data)

    def feed(self, data: bytes) -> None:
        self.incoming.put_nowait(data)


def pair() -> tuple[Pipe, Pipe]:
    a, b = Pipe(), Pipe()
    a.peer, b.peer = b, a
    return a, b


# -- framing -------------------------------------------------------------------

def test_header_is_length_stream_type_flags_big_endian() -> None:
    assert encode(5, ttrpc.TYPE_REQUEST, b"abc", flags=ttrpc.FLAG_REMOTE_CLOSED) == \
        bytes([0, 0, 0, 3, 0, 0, 0, 5, 1, 1]) + b"abc"


def test_reader_takes_a_message_split_into_single_bytes() -> None:
    data = encode(1, ttrpc.TYPE_REQUEST, b"hello") + encode(3, ttrpc.TYPE_RESPONSE, b"")
    r = FrameReader()
    frames = []
    for i in range(len(data)):
        frames += r.feed(data[i:i + 1])
    assert [(f.stream_id, f.type, f.payload) for f in frames] == [(1, 1, b"hello"), (3, 2, b"")]
    assert r.pending == 0


def test_reader_takes_coalesced_messages_and_keeps_a_partial_one() -> None:
    data = encode(1, 1, b"a" * 7) + encode(3, 1, b"b" * 300) + encode(5, 1, b"c" * 20)
    r = FrameReader()
    frames = r.feed(data[:-5])
    assert [f.stream_id for f in frames] == [1, 3]
    assert r.pending == len(encode(5, 1, b"c" * 20)) - 5
    assert [f.payload for f in r.feed(data[-5:])] == [b"c" * 20]


def test_oversized_message_is_skipped_unread_and_the_stream_goes_on() -> None:
    big = ttrpc.MAX_MESSAGE + 1
    header = ttrpc.HEADER.pack(big, 7, ttrpc.TYPE_REQUEST, 0)
    r = FrameReader()
    frames = r.feed(header + b"x" * 1000)
    assert len(frames) == 1 and frames[0].oversized == big and frames[0].stream_id == 7
    frames = r.feed(b"x" * (big - 1000 - 10))
    assert frames == [] and r.pending == 0
    frames = r.feed(b"x" * 10 + encode(9, 1, b"ok"))
    assert [(f.stream_id, f.payload) for f in frames] == [(9, b"ok")]


def test_encode_refuses_a_payload_over_4_mib() -> None:
    with pytest.raises(TtrpcError) as e:
        encode(1, 1, b"x" * (ttrpc.MAX_MESSAGE + 1))
    assert e.value.code == Code.RESOURCE_EXHAUSTED


# -- server --------------------------------------------------------------------

async def _echo(payload: bytes) -> bytes:
    return payload[::-1]


async def _fail(payload: bytes) -> bytes:
    raise TtrpcError(Code.NOT_FOUND, "no such thing")


async def _bug(payload: bytes) -> bytes:
    raise KeyError("oops")


async def _slow(payload: bytes) -> bytes:
    await asyncio.sleep(30)
    return b""


HANDLERS = {("svc", "Echo"): _echo, ("svc", "Fail"): _fail, ("svc", "Bug"): _bug, ("svc", "Slow"): _slow}


def _request(sid: int, service: str, method: str, payload: bytes = b"", timeout_nano: int = 0) -> bytes:
    req = tpb.Request(service=service, method=method, payload=payload, timeout_nano=timeout_nano)
    return encode(sid, ttrpc.TYPE_REQUEST, req.SerializeToString())


async def _responses(pipe: Pipe, count: int) -> dict[int, tpb.Response]:
    r = FrameReader()
    out: dict[int, tpb.Response] = {}
    while len(out) < count:
        await asyncio.sleep(0.01)
        for f in r.feed(bytes(pipe.written)):
            assert f.type == ttrpc.TYPE_RESPONSE
            out[f.stream_id] = tpb.Response.FromString(f.payload)
        pipe.written.clear()
    return out


def test_server_answers_known_unknown_failing_and_malformed_calls() -> None:
    async def main() -> dict[int, tpb.Response]:
        pipe = Pipe()
        server = ttrpc.Server(pipe, HANDLERS)
        task = asyncio.create_task(server.serve())
        data = (_request(1, "svc", "Echo", b"abc") + _request(3, "svc", "Nope") + _request(5, "other", "Echo")
                + _request(7, "svc", "Fail") + _request(9, "svc", "Bug") + _request(10, "svc", "Echo")
                + encode(11, ttrpc.TYPE_REQUEST, b"\xff\xff\xff")
                + ttrpc.HEADER.pack(ttrpc.MAX_MESSAGE + 5, 13, ttrpc.TYPE_REQUEST, 0))
        # Split and coalesced: the bytes arrive in odd pieces.
        for i in range(0, len(data), 7):
            pipe.feed(data[i:i + 7])
        pipe.feed(b"z" * (ttrpc.MAX_MESSAGE + 5))
        pipe.feed(_request(15, "svc", "Echo", b"after"))
        out = await _responses(pipe, 9)
        pipe.feed(b"")
        await task
        return out

    out = asyncio.run(main())
    assert out[1].status.code == 0 and out[1].payload == b"cba"
    assert (out[3].status.code, out[3].status.message) == (Code.UNIMPLEMENTED, "method Nope")
    assert (out[5].status.code, out[5].status.message) == (Code.UNIMPLEMENTED, "service other")
    assert (out[7].status.code, out[7].status.message) == (Code.NOT_FOUND, "no such thing")
    assert out[9].status.code == Code.UNKNOWN and "oops" in out[9].status.message
    assert out[10].status.code == Code.INVALID_ARGUMENT  # even: not a client's stream
    assert out[11].status.code == Code.INVALID_ARGUMENT  # not a ttrpc.Request
    assert out[13].status.code == Code.RESOURCE_EXHAUSTED
    assert out[15].payload == b"retfa"  # the connection survived all of it


def test_server_answers_deadline_exceeded_after_the_callers_timeout() -> None:
    async def main() -> tpb.Response:
        pipe = Pipe()
        task = asyncio.create_task(ttrpc.Server(pipe, HANDLERS).serve())
        pipe.feed(_request(1, "svc", "Slow", timeout_nano=50_000_000))
        out = await _responses(pipe, 1)
        pipe.feed(b"")
        await task
        return out[1]

    assert asyncio.run(main()).status.code == Code.DEADLINE_EXCEEDED


# -- client --------------------------------------------------------------------

def test_client_and_server_round_trip_with_odd_rising_stream_ids() -> None:
    async def main() -> tuple[list[bytes], bytes]:
        a, b = pair()
        server = asyncio.create_task(ttrpc.Server(b, HANDLERS).serve())
        client = ttrpc.Client(a)
        receiving = asyncio.create_task(client.receive())
        replies = await asyncio.gather(*(client.call("svc", "Echo", bytes([i]) * 3, 1.0) for i in range(3)))
        with pytest.raises(TtrpcError) as e:
            await client.call("svc", "Fail", b"", 1.0)
        assert e.value.code == Code.NOT_FOUND
        sent = bytes(a.written)
        a.feed(b"")
        b.feed(b"")
        await asyncio.gather(server, receiving)
        return list(replies), sent

    replies, sent = asyncio.run(main())
    assert replies == [b"\x00" * 3, b"\x01" * 3, b"\x02" * 3]
    assert [f.stream_id for f in FrameReader().feed(sent)] == [1, 3, 5, 7]


def test_client_times_out_and_fails_waiting_calls_when_the_channel_closes() -> None:
    async def main() -> tuple[TtrpcError, TtrpcError, TtrpcError]:
        pipe = Pipe()  # nobody answers
        client = ttrpc.Client(pipe)
        receiving = asyncio.create_task(client.receive())
        with pytest.raises(TtrpcError) as timed_out:
            await client.call("svc", "Echo", b"", 0.05)
        waiting = asyncio.create_task(client.call("svc", "Echo", b"", 5.0))
        await asyncio.sleep(0.01)
        pipe.feed(b"")
        await receiving
        with pytest.raises(TtrpcError) as lost:
            await waiting
        with pytest.raises(TtrpcError) as after:
            await client.call("svc", "Echo", b"", 1.0)
        return timed_out.value, lost.value, after.value

    timed_out, lost, after = asyncio.run(main())
    assert timed_out.code == Code.DEADLINE_EXCEEDED
    assert lost.code == Code.UNAVAILABLE and after.code == Code.UNAVAILABLE


def test_client_reports_a_malformed_or_oversized_reply_on_its_call_only() -> None:
    async def main() -> tuple[TtrpcError, TtrpcError]:
        pipe = Pipe()
        client = ttrpc.Client(pipe)
        receiving = asyncio.create_task(client.receive())
        first = asyncio.create_task(client.call("svc", "A", b"", 1.0))
        second = asyncio.create_task(client.call("svc", "B", b"", 1.0))
        await asyncio.sleep(0.01)
        pipe.feed(encode(1, ttrpc.TYPE_RESPONSE, b"\xff\xff"))
        pipe.feed(ttrpc.HEADER.pack(ttrpc.MAX_MESSAGE + 1, 3, ttrpc.TYPE_RESPONSE, 0) + b"\0" * (ttrpc.MAX_MESSAGE + 1))
        errors = []
        for t in (first, second):
            with pytest.raises(TtrpcError) as e:
                await t
            errors.append(e.value)
        pipe.feed(b"")
        await receiving
        return errors[0], errors[1]

    malformed, oversized = asyncio.run(main())
    assert malformed.code == Code.INTERNAL
    assert oversized.code == Code.RESOURCE_EXHAUSTED
