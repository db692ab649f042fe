"""ttRPC, containerd's small RPC protocol, over one byte channel (asyncio).

A message is a 10-byte header (big-endian: 4-byte payload length, 4-byte stream
id, 1-byte type, 1-byte flags) and the payload; a payload is at most 4 MiB. A call
is one Request message (a `ttrpc.Request` protobuf naming service and method, with
the encoded request and a timeout) on a stream id the client picks (odd, rising),
answered by one Response message on the same id (a `ttrpc.Response`: a
google.rpc.Status and the encoded reply). Only unary calls are implemented: NRI uses
nothing else.

`FrameReader` parses a byte stream into messages however it was split or joined on
the way; `Server` answers calls with a handler table, `Client` makes them. Both run
on a `Channel` (one logical connection of the NRI multiplexer, `mux.py`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import DecodeError

from cri_resmgr._proto import nri_ttrpc_pb2 as tpb
from cri_resmgr.errors import CriResmgrError

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IIBB")
HEADER_LEN = HEADER.size  # 10
MAX_MESSAGE = 4 << 20  # payload bytes; ttRPC's messageLengthMax

TYPE_REQUEST = 0x1
TYPE_RESPONSE = 0x2
TYPE_DATA = 0x3

FLAG_REMOTE_CLOSED = 0x1
FLAG_REMOTE_OPEN = 0x2
FLAG_NO_DATA = 0x4


class Code(enum.IntEnum):
    """The gRPC status codes ttRPC carries."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


def code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return f"CODE_{code}"


class TtrpcError(CriResmgrError):
    """A call that failed, with its status code (the peer's, or ours: a timeout, a
    closed connection)."""

    def __init__(self, code: int, message: str):
        super().__init__(f"{code_name(code)}: {message}")
        self.code = code
        self.message = message


class Channel(Protocol):
    """A byte pipe: one logical connection of the multiplexer, or a test's."""

    async def read(self) -> bytes:
        """The next bytes that arrived; b"" once the channel is closed."""

    def write(self, data: bytes) -> None: ...


@dataclass(frozen=True)
class Frame:
    stream_id: int
    type: int
    flags: int
    payload: bytes
    oversized: int = 0  # the announced length of a payload that was skipped, unread


def encode(stream_id: int, mtype: int, payload: bytes, flags: int = 0) -> bytes:
    """One message on the wire; a payload over MAX_MESSAGE is refused, as ttRPC does."""
    if len(payload) > MAX_MESSAGE:
        raise TtrpcError(Code.RESOURCE_EXHAUSTED,
                         f"message length {len(payload)} exceeds maximum message size of {MAX_MESSAGE}")
    return HEADER.pack(len(payload), stream_id, mtype, flags) + payload


class FrameReader:
    """Parses messages from bytes fed in any pieces. A payload over MAX_MESSAGE is
    skipped without being held in memory and reported as an `oversized` frame, so
    the caller can answer that stream and the connection stays usable."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._skip = 0  # bytes of an oversized payload still to drop

    def feed(self, data: bytes) -> list[Frame]:
        frames: list[Frame] = []
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data
        while len(self._buf) >= HEADER_LEN and not self._skip:
            length, sid, mtype, flags = HEADER.unpack_from(self._buf)
            if length > MAX_MESSAGE:
                del self._buf[:HEADER_LEN]
                dropped = min(length, len(self._buf))
                del self._buf[:dropped]
                self._skip = length - dropped
                frames.append(Frame(sid, mtype, flags, b"", oversized=length))
                continue
            end = HEADER_LEN + length
            if len(self._buf) < end:
                break
            frames.append(Frame(sid, mtype, flags, bytes(self._buf[HEADER_LEN:end])))
            del self._buf[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held for a message not complete yet."""
        return len(self._buf)


# A method's handler: the encoded request in, the encoded reply out; raises
# TtrpcError for a status of its choosing (anything else is answered UNKNOWN).
Handler = Callable[[bytes], Awaitable[bytes]]


class Server:
    """Answers calls on one channel. Each call runs in its own task under the
    caller's timeout (or `default_timeout`), so a slow one holds up no other."""

    def __init__(self, channel: Channel, handlers: Mapping[tuple[str, str], Handler],
                 default_timeout: float = 10.0, name: str = "ttrpc server",
                 in_flight: Callable[[bool], None] | None = None):
        """`in_flight(True)` when a call goes to its handler, `in_flight(False)` once its
        reply (or error) is written: what is written after that follows the reply."""
        self._ch = channel
        self._handlers = dict(handlers)
        self._in_flight = in_flight
        self._default_timeout = default_timeout
        self._name = name
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Until the channel closes; calls in flight are cancelled then."""
        reader = FrameReader()
        try:
            while data := await self._ch.read():
                for frame in reader.feed(data):
                    self._on_frame(frame)
        finally:
            for t in list(self._tasks):
                t.cancel()

    def _on_frame(self, f: Frame) -> None:
        if f.type != TYPE_REQUEST:
            log.debug("%s: ignoring a message of type %d on stream %d", self._name, f.type, f.stream_id)
            return
        if f.oversized:
            self._status(f.stream_id, Code.RESOURCE_EXHAUSTED,
                         f"message length {f.oversized} exceed maximum message size of {MAX_MESSAGE}")
            return
        if f.stream_id % 2 != 1:
            self._status(f.stream_id, Code.INVALID_ARGUMENT, "StreamID must be odd for client initiated streams")
            return
        try:
            req = tpb.Request.FromString(f.payload)
        except DecodeError as e:
            self._status(f.stream_id, Code.INVALID_ARGUMENT, f"unmarshal request error: {e}")
            return
        handler = self._handlers.get((req.service, req.method))
        if handler is None:
            known = any(s == req.service for s, _ in self._handlers)
            what = f"method {req.method}" if known else f"service {req.service}"
            log.warning("%s: %s/%s is not implemented", self._name, req.service, req.method)
            self._status(f.stream_id, Code.UNIMPLEMENTED, what)
            return
        timeout = req.timeout_nano / 1e9 if req.timeout_nano > 0 else self._default_timeout
        if self._in_flight is not None:
            self._in_flight(True)
        task = asyncio.get_running_loop().create_task(self._call(f.stream_id, req, handler, timeout))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, sid: int, req: tpb.Request, handler: Handler, timeout: float) -> None:
        try:
            await self._answer(sid, req, handler, timeout)
        finally:
            if self._in_flight is not None:
                self._in_flight(False)

    async def _answer(self, sid: int, req: tpb.Request, handler: Handler, timeout: float) -> None:
        try:
            reply = await asyncio.wait_for(handler(req.payload), timeout)
        except TtrpcError as e:
            self._status(sid, e.code, e.message)
            return
        except TimeoutError:
            log.error("%s: %s/%s did not finish within %gs", self._name, req.service, req.method, timeout)
            self._status(sid, Code.DEADLINE_EXCEEDED, f"{req.method}: no answer within {timeout:g}s")
            return
        except Exception as e:  # a bug in a handler: the caller gets UNKNOWN, the log the traceback
            log.exception("%s: %s/%s failed", self._name, req.service, req.method)
            self._status(sid, Code.UNKNOWN, f"{req.method}: {e}")
            return
        self._send(sid, tpb.Response(payload=reply))

    def _status(self, sid: int, code: int, message: str) -> None:
        self._send(sid, tpb.Response(status=tpb.Status(code=code, message=message)))

    def _send(self, sid: int, resp: tpb.Response) -> None:
        data = resp.SerializeToString()
        if len(data) > MAX_MESSAGE:
            resp = tpb.Response(status=tpb.Status(
                code=Code.RESOURCE_EXHAUSTED, message=f"reply of {len(data)} bytes exceeds {MAX_MESSAGE}"))
            data = resp.SerializeToString()
        try:
            self._ch.write(encode(sid, TYPE_RESPONSE, data))
        except (ConnectionError, OSError) as e:
            log.debug("%s: reply on stream %d not sent: %s", self._name, sid, e)


class Client:
    """Makes calls on one channel: odd stream ids from 1, each answered by id."""

    def __init__(self, channel: Channel, name: str = "ttrpc client"):
        self._ch = channel
        self._name = name
        self._next_id = 1
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._closed: str | None = None

    async def receive(self) -> None:
        """Reads replies until the channel closes; then every call waiting fails UNAVAILABLE."""
        reader = FrameReader()
        try:
            while data := await self._ch.read():
                for frame in reader.feed(data):
                    self._on_frame(frame)
        finally:
            self._close("connection closed")

    def _on_frame(self, f: Frame) -> None:
        if f.type != TYPE_RESPONSE:
            log.debug("%s: ignoring a message of type %d on stream %d", self._name, f.type, f.stream_id)
            return
        fut = self._pending.pop(f.stream_id, None)
        if fut is None or fut.done():
            log.debug("%s: reply for unknown stream %d dropped", self._name, f.stream_id)
            return
        if f.oversized:
            fut.set_exception(TtrpcError(Code.RESOURCE_EXHAUSTED,
                                         f"reply length {f.oversized} exceeds {MAX_MESSAGE}"))
            return
        try:
            resp = tpb.Response.FromString(f.payload)
        except DecodeError as e:
            fut.set_exception(TtrpcError(Code.INTERNAL, f"malformed ttrpc response: {e}"))
            return
        if resp.status.code != Code.OK:
            fut.set_exception(TtrpcError(resp.status.code, resp.status.message))
        else:
            fut.set_result(resp.payload)

    async def call(self, service: str, method: str, payload: bytes, timeout: float) -> bytes:
        """The encoded reply; raises TtrpcError (the peer's status, DEADLINE_EXCEEDED,
        UNAVAILABLE when the connection is or goes away, RESOURCE_EXHAUSTED)."""
        if self._closed is not None:
            raise TtrpcError(Code.UNAVAILABLE, self._closed)
        sid = self._next_id
        self._next_id += 2
        req = tpb.Request(service=service, method=method, payload=payload, timeout_nano=int(timeout * 1e9))
        data = encode(sid, TYPE_REQUEST, req.SerializeToString())
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[sid] = fut
        try:
            self._ch.write(data)
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise TtrpcError(Code.DEADLINE_EXCEEDED, f"{service}/{method}: no reply within {timeout:g}s") from None
        except (ConnectionError, OSError) as e:
            raise TtrpcError(Code.UNAVAILABLE, f"{service}/{method}: {e}") from None
        finally:
            self._pending.pop(sid, None)

    @property
    def in_flight(self) -> int:
        """Calls made and not answered yet."""
        return len(self._pending)

    def _close(self, why: str) -> None:
        self._closed = why
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(TtrpcError(Code.UNAVAILABLE, why))
        self._pending.clear()
