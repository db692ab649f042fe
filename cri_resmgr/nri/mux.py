"""NRI's connection multiplexer: several logical byte streams over one socket.

Every frame is an 8-byte header (big-endian: 4-byte connection id, 4-byte payload
length) and the payload. Opening a connection sends nothing: both ends simply use
the same ids. NRI uses two: PLUGIN_SERVICE_CONN (1), on which the plugin serves the
Plugin service and the runtime calls it, and RUNTIME_SERVICE_CONN (2), on which the
runtime serves the Runtime service (RegisterPlugin, UpdateContainers) and the plugin
calls it. Frames for an id nobody opened are dropped, as NRI's Go multiplexer does.

What is written goes out in frames of at most WRITE_CHUNK bytes: Go's ttRPC reads a
multiplexed connection through a 4096-byte buffer and refuses a frame that does not
fit the read it is given, so small frames are what every peer can take.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from cri_resmgr.errors import CriResmgrError
from cri_resmgr.nri.ttrpc import HEADER_LEN, MAX_MESSAGE

log = logging.getLogger(__name__)

MUX_HEADER = struct.Struct(">II")
MUX_HEADER_LEN = MUX_HEADER.size  # 8
MAX_PAYLOAD = HEADER_LEN + MAX_MESSAGE  # one whole ttRPC message; NRI's maxPayloadSize
WRITE_CHUNK = 4096

PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2


class MuxError(CriResmgrError):
    """A malformed frame: the whole connection is closed."""


def frame(conn_id: int, payload: bytes) -> bytes:
    """One frame as it goes on the wire."""
    if len(payload) > MAX_PAYLOAD:
        raise MuxError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return MUX_HEADER.pack(conn_id, len(payload)) + payload


class MuxConn:
    """One logical connection: a `ttrpc.Channel`."""

    def __init__(self, mux: Mux, conn_id: int):
        self._mux = mux
        self.id = conn_id
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def read(self) -> bytes:
        return await self._queue.get()

    def write(self, data: bytes) -> None:
        self._mux.write(self.id, data)

    def _deliver(self, data: bytes) -> None:
        self._queue.put_nowait(data)


class Mux:
    """The multiplexer over a stream pair. `run()` reads frames until the socket
    closes or a frame is malformed; then every logical connection reads b"" (closed)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._conns: dict[int, MuxConn] = {}
        self._closed = False
        self.error: str | None = None  # why it closed, when not simply at end of file

    def open(self, conn_id: int) -> MuxConn:
        if conn_id == 0:
            raise MuxError("connection id 0 is reserved")
        conn = self._conns.get(conn_id)
        if conn is None:
            conn = self._conns[conn_id] = MuxConn(self, conn_id)
            if self._closed:
                conn._deliver(b"")
        return conn

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self) -> None:
        try:
            while True:
                header = await self._reader.readexactly(MUX_HEADER_LEN)
                conn_id, length = MUX_HEADER.unpack(header)
                if length > MAX_PAYLOAD:
                    raise MuxError(f"frame for connection {conn_id} announces {length} bytes, "
                                   f"more than the {MAX_PAYLOAD} allowed")
                payload = await self._reader.readexactly(length) if length else b""
                conn = self._conns.get(conn_id)
                if conn is None:
                    log.debug("mux: %d bytes for unopened connection %d dropped", length, conn_id)
                elif payload:
                    conn._deliver(payload)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                self.error = f"connection closed in the middle of a frame ({len(e.partial)} bytes read)"
        except MuxError as e:
            self.error = str(e)
        except (ConnectionError, OSError) as e:
            self.error = f"connection lost: {e}"
        finally:
            self.close()

    def write(self, conn_id: int, data: bytes) -> None:
        if self._closed:
            raise ConnectionResetError("NRI connection is closed")
        out = bytearray()
        for i in range(0, len(data), WRITE_CHUNK):
            out += frame(conn_id, data[i:i + WRITE_CHUNK])
        # One write for the whole message: no other message's frames land in between.
        self._writer.write(bytes(out))

    async def drain(self) -> None:
        if not self._closed:
            await self._writer.drain()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in self._conns.values():
            conn._deliver(b"")
        self._writer.close()
