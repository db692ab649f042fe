"""A client connection served while the runtime cannot be reached."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import grpc

from cri_resmgr.transport.framerelay import frames as h2

if TYPE_CHECKING:
    from cri_resmgr.transport.framerelay.relay import FrameRelay

_RETRY_CONNECT_SECONDS = 0.5


class Unreachable:
    """Serves a client connection while the runtime is unreachable: every call
    gets UNAVAILABLE at once; when the runtime answers again, GOAWAY sends the
    client to a new connection that is relayed."""

    def __init__(self, relay: FrameRelay, client: asyncio.Transport, why: str):
        self.relay = relay
        self.transport = client
        self.why = why
        self.buf = bytearray()
        self.preface = False
        self.last_stream = 0
        self.closed = False
        self.block: int | None = None  # the stream whose header block is unfinished
        client.write(h2.settings_frame(b""))
        self._watch = asyncio.ensure_future(self._wait_for_runtime())

    def busy(self) -> bool:
        return False

    def drain(self) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._watch.cancel()
            self.relay.connections.discard(self)
            self.transport.close()

    def client_lost(self) -> None:
        self.close()

    def pause_runtime(self, pause: bool) -> None:
        pass

    async def _wait_for_runtime(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_RETRY_CONNECT_SECONDS)
            try:
                transport, _ = await loop.create_unix_connection(asyncio.Protocol, self.relay.upstream_path)
            except OSError:
                continue
            transport.close()
            break
        self.transport.write(h2.goaway(self.last_stream))
        await asyncio.sleep(0.2)
        self.close()

    def _unavailable(self, stream_id: int) -> bytes:
        return h2.trailers_only(stream_id, grpc.StatusCode.UNAVAILABLE,
                                f"cri-resmgr: the runtime at {self.relay.upstream_path} is not reachable: {self.why}")

    def from_client(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        first = 0  # where the frames start
        if not self.preface:
            if len(buf) < len(h2.PREFACE):
                return
            self.preface = True
            first = len(h2.PREFACE)
        out: list[bytes] = []
        done = first
        try:
            for pos, end, ftype, flags, sid in h2.complete_frames(buf, first):
                done = end
                out += self._answer(ftype, flags, sid, bytes(buf[pos + 9:end]))
        except ValueError as e:  # PeerError included
            self.transport.write(h2.goaway(self.last_stream, getattr(e, "code", h2.PROTOCOL_ERROR)))
            self.close()
            return
        del buf[:done]
        if out:
            self.transport.write(b"".join(out))

    def _answer(self, ftype: int, flags: int, sid: int, payload: bytes) -> list[bytes]:
        """What the relay sends back for one client frame."""
        if self.block is not None and (ftype != h2.CONTINUATION or sid != self.block):
            raise h2.PeerError(f"frame of type {ftype} inside the header block of stream {self.block}")
        if ftype == h2.SETTINGS and not flags & h2.ACK:
            return [h2.frame(h2.SETTINGS, h2.ACK, 0)]
        if ftype == h2.PING and not flags & h2.ACK:
            return [h2.frame(h2.PING, h2.ACK, 0, payload)]
        if ftype == h2.DATA and payload:
            return [h2.window_update(0, len(payload))]
        if ftype == h2.HEADERS and sid > self.last_stream:
            self.last_stream = sid
            if flags & h2.END_HEADERS:
                return [self._unavailable(sid)]
            self.block = sid
        elif ftype == h2.CONTINUATION and flags & h2.END_HEADERS and sid == self.block:
            self.block = None
            return [self._unavailable(sid)]
        return []
