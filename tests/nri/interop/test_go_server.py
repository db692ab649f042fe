"""cri-resmgr's ttRPC client and multiplexer (cri_resmgr/nri/) calling the real
containerd/ttrpc Go server: replies, and the status codes and messages Go's server
gives for an unknown service or method, a handler's error, a malformed request, an
even stream id and an oversized message. The plugin's own server answers the same
(test_go_runtime.py and tests/nri/test_ttrpc.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from cri_resmgr._proto import nri_ttrpc_pb2 as tpb
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, Mux
from cri_resmgr.nri.ttrpc import MAX_MESSAGE, TYPE_REQUEST, Code, FrameReader
from tests.nri.interop.peer import GoPeer

ECHO = "interop.v1.Echo"


def with_go_server(go_binary: Path, workdir: Path,
                   scenario: Callable[[Mux, ttrpc.Client], Awaitable[None]]) -> None:
    sock = str(workdir / "go.sock")
    go = GoPeer(go_binary, ["-mode", "serve", "-socket", sock], workdir / "go.log")

    async def main() -> None:
        reader, writer = await asyncio.open_unix_connection(sock)
        mux = Mux(reader, writer)
        client = ttrpc.Client(mux.open(PLUGIN_SERVICE_CONN))
        tasks = [asyncio.create_task(mux.run()), asyncio.create_task(client.receive())]
        try:
            await scenario(mux, client)
        finally:
            mux.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    try:
        go.event("listening")
        asyncio.run(main())
    except BaseException:
        print((workdir / "go.log").read_text(errors="replace"))
        raise
    finally:
        go.stop()


async def status_of(call: Awaitable[bytes]) -> tuple[int, str]:
    with pytest.raises(ttrpc.TtrpcError) as e:
        await call
    return e.value.code, e.value.message


async def raw_request(mux: Mux, stream_id: int, header_length: int, payload: bytes) -> tpb.Response:
    """Writes one hand-made ttRPC message on a second view of connection 1 and reads
    the reply to `stream_id` from the Go server (the Client ignores the stream)."""
    conn = mux.open(PLUGIN_SERVICE_CONN)
    reply: asyncio.Future[tpb.Response] = asyncio.get_running_loop().create_future()
    seen = FrameReader()
    original = conn._deliver

    def tap(data: bytes) -> None:
        for f in seen.feed(data):
            if f.stream_id == stream_id and not reply.done():
                reply.set_result(tpb.Response.FromString(f.payload))
        original(data)

    conn._deliver = tap  # type: ignore[method-assign]
    try:
        conn.write(ttrpc.HEADER.pack(header_length, stream_id, TYPE_REQUEST, 0) + payload)
        return await asyncio.wait_for(reply, 60)
    finally:
        conn._deliver = original  # type: ignore[method-assign]


def test_calls_and_error_statuses_from_gos_ttrpc_server(go_binary: Path, workdir: Path) -> None:
    async def scenario(mux: Mux, client: ttrpc.Client) -> None:
        assert await client.call(ECHO, "Echo", b"\x0a\x03abc", 30) == b"\x0a\x03abc"
        big = b"x" * (1 << 20)  # many multiplexer frames each way
        assert await client.call(ECHO, "Echo", big, 30) == big
        assert await status_of(client.call(ECHO, "Nope", b"", 30)) == (Code.UNIMPLEMENTED, "method Nope")
        assert await status_of(client.call("interop.v1.Nope", "Echo", b"", 30)) == \
            (Code.UNIMPLEMENTED, "service interop.v1.Nope")
        assert await status_of(client.call(ECHO, "Fail", b"", 30)) == (Code.NOT_FOUND, "no such thing")

        malformed = await raw_request(mux, 1001, 2, b"\x0a\xff")
        assert malformed.status.code == Code.INVALID_ARGUMENT
        assert malformed.status.message.startswith("unmarshal request error: ")
        even = tpb.Request(service=ECHO, method="Echo").SerializeToString()
        evens = await raw_request(mux, 1002, len(even), even)
        assert (evens.status.code, evens.status.message) == (
            Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams")
        oversized = await raw_request(mux, 1003, MAX_MESSAGE + 1, b"\0" * (MAX_MESSAGE + 1))
        assert (oversized.status.code, oversized.status.message) == (
            Code.RESOURCE_EXHAUSTED, f"message length {MAX_MESSAGE + 1} exceed maximum message size of {MAX_MESSAGE}")
        # The connection survived all of it.
        assert await client.call(ECHO, "Echo", b"", 30) == b""

    with_go_server(go_binary, workdir, scenario)


def test_our_server_answers_like_gos_for_the_same_bad_requests() -> None:
    """The plugin side of the same cases, byte-level: cri_resmgr's Server gives Go's
    codes and wording (the Go side's are pinned above)."""
    sent: list[bytes] = []

    class Pipe:
        def __init__(self) -> None:
            self.q: asyncio.Queue[bytes] = asyncio.Queue()

        async def read(self) -> bytes:
            return await self.q.get()

        def write(self, data: bytes) -> None:
            sent.append(data)

    async def main() -> list[tpb.Response]:
        pipe = Pipe()

        async def echo(p: bytes) -> bytes:
            return p

        server = ttrpc.Server(pipe, {(ECHO, "Echo"): echo})
        task = asyncio.create_task(server.serve())
        even = tpb.Request(service=ECHO, method="Echo").SerializeToString()
        for sid, length, payload in ((1001, 2, b"\x0a\xff"), (1002, len(even), even),
                                     (1003, MAX_MESSAGE + 1, b"\0" * (MAX_MESSAGE + 1))):
            pipe.q.put_nowait(ttrpc.HEADER.pack(length, sid, TYPE_REQUEST, 0) + payload)
        for _ in range(100):
            if len(sent) == 3:
                break
            await asyncio.sleep(0.01)
        pipe.q.put_nowait(b"")
        await task
        return [tpb.Response.FromString(f.payload) for f in FrameReader().feed(b"".join(sent))]

    malformed, even, oversized = asyncio.run(main())
    assert malformed.status.code == Code.INVALID_ARGUMENT
    assert malformed.status.message.startswith("unmarshal request error: ")
    assert (even.status.code, even.status.message) == (
        Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams")
    assert (oversized.status.code, oversized.status.message) == (
        Code.RESOURCE_EXHAUSTED, f"message length {MAX_MESSAGE + 1} exceed maximum message size of {MAX_MESSAGE}")
