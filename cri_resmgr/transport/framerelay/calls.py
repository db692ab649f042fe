"""What the frame relay knows of a call: its route, and the state of the calls it looks into."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final, Literal, TypeAlias

import grpc
from google.protobuf.message import Message

from cri_resmgr.transport.callstats import MethodStats
from cri_resmgr.transport.contract import DumpSink, Interceptor, ReplyScan, StreamReading
from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.methods import Method


class UpstreamError(grpc.aio.AioRpcError):
    """An intercepted call's forward failed, as the interceptor sees it.

    `from_runtime`: the runtime's own status (passed on to the client as the
    runtime sent it); otherwise the relay could not complete the call.
    """

    def __init__(self, code: grpc.StatusCode, details: str, from_runtime: bool = True):
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
        self.from_runtime = from_runtime


# A route's kind; each route class below has one (a tag type checkers narrow the union on).
PASS: Final = 0
DUMP: Final = 1
INTERCEPT: Final = 2
REFUSE: Final = 3
OBSERVE: Final = 4
OBSERVE_STREAM: Final = 5


class PassRoute:
    """The path's calls go through unread."""

    __slots__ = ("kind", "path", "method", "stats")

    def __init__(self, path: str, method: Method | None) -> None:
        self.kind: Literal[0] = PASS
        self.path = path
        self.method = method
        self.stats: MethodStats | None = None  # set by the relay when it times calls


class RefuseRoute:
    """The path's service is disabled: the relay answers UNIMPLEMENTED with `refusal`."""

    __slots__ = ("kind", "path", "method", "refusal", "stats")

    def __init__(self, path: str, refusal: str) -> None:
        self.kind: Literal[3] = REFUSE
        self.path = path
        self.method = None  # not looked up: FrameRelay.route keeps no refused route
        self.refusal = refusal
        self.stats: MethodStats | None = None  # never relayed, never timed


class DumpRoute:
    """The path's messages and final status are copied to `dumper`."""

    __slots__ = ("kind", "path", "method", "dumper", "streaming", "stats")

    def __init__(self, path: str, method: Method | None, dumper: DumpSink) -> None:
        self.kind: Literal[1] = DUMP
        self.path = path
        self.method = method
        self.stats: MethodStats | None = None
        self.dumper = dumper
        self.streaming = method is None or method.server_streaming or method.client_streaming


class InterceptRoute:
    """The path's calls (unary) go to `interceptor`, decoded with the v1 message classes."""

    __slots__ = ("kind", "path", "method", "dumper", "interceptor", "request_type", "reply_type", "stats")

    def __init__(self, path: str, method: Method, dumper: DumpSink | None, interceptor: Interceptor,
                 v1: Method) -> None:
        self.kind: Literal[2] = INTERCEPT
        self.path = path
        self.method = method
        self.stats: MethodStats | None = None
        self.dumper = dumper
        self.interceptor = interceptor
        self.request_type = v1.request
        self.reply_type = v1.response


class ObserveRoute:
    """The path's calls go through unread; `scan` reads a copy of each reply (a ReplyObserver)."""

    __slots__ = ("kind", "path", "method", "scan", "stats")

    def __init__(self, path: str, method: Method, scan: ReplyScan) -> None:
        self.kind: Literal[4] = OBSERVE
        self.path = path
        self.method = method
        self.scan = scan
        self.stats: MethodStats | None = None


class ObserveStreamRoute:
    """The path's calls (server-streaming) go through unread; each reply message is also
    handed to a reading that `start` makes per call (a StreamObserver). `dump`: the
    calls are dumped as well, as that route dumps them."""

    __slots__ = ("kind", "path", "method", "start", "dump", "stats")

    def __init__(self, path: str, method: Method, start: Callable[[], StreamReading],
                 dump: DumpRoute | None) -> None:
        self.kind: Literal[5] = OBSERVE_STREAM
        self.path = path
        self.method = method
        self.start = start
        self.dump = dump
        self.stats: MethodStats | None = None


Route: TypeAlias = PassRoute | RefuseRoute | DumpRoute | InterceptRoute | ObserveRoute | ObserveStreamRoute


# -- per-stream state for the calls the relay looks into ----------------------------------

class Dumped:
    __slots__ = ("route", "call_id", "t0", "requests", "replies", "bodies")

    def __init__(self, route: DumpRoute, call_id: int, max_message: int):
        self.route = route
        self.call_id = call_id
        self.t0 = time.perf_counter()
        self.requests = h2.MessageSplitter(max_message)
        self.replies = h2.MessageSplitter(max_message)
        self.bodies: list[bytes] = []

    def request_data(self, data: bytes) -> None:
        for _, body in self.requests.feed(data):
            self.route.dumper.request(self.route.path, self.call_id, body)

    def reply_data(self, data: bytes) -> None:
        for _, body in self.replies.feed(data):
            if self.route.streaming:
                self.route.dumper.reply(self.route.path, self.call_id, body, time.perf_counter() - self.t0)
            else:
                self.bodies.append(body)

    def finish(self, code: grpc.StatusCode, details: str) -> None:
        latency = time.perf_counter() - self.t0
        dumper, path = self.route.dumper, self.route.path
        if code == grpc.StatusCode.OK and not self.route.streaming:
            dumper.reply(path, self.call_id, self.bodies[0] if self.bodies else b"", latency)
        elif code == grpc.StatusCode.OK:
            dumper.reply(path, self.call_id, None, latency, code)
        else:
            dumper.reply(path, self.call_id, None, latency, code, details)


class Intercepted:
    __slots__ = ("route", "sid", "call_id", "t0", "body", "ended", "room", "reserved", "window", "held",
                 "headers_sent", "done", "reset", "status", "reply_body", "reply_overflow", "reply", "forwarded",
                 "task", "finished")

    def __init__(self, route: InterceptRoute, sid: int, call_id: int, window: int):
        self.route = route
        self.sid = sid
        self.call_id = call_id
        self.t0 = time.perf_counter()
        self.body = bytearray()  # the request as the client sent it
        self.ended = False  # the client's END_STREAM came
        self.room = window  # the client's stream window, as the relay grants it
        self.reserved = 0  # bytes of the relay's held budget this call holds
        self.window = window  # the runtime's stream window for what the relay sends
        self.held: list[bytes] = []  # the runtime's final frames (trailers or RST_STREAM)
        self.headers_sent = False  # the runtime's response headers went to the client
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reset = False  # the runtime reset the stream
        self.status: tuple[grpc.StatusCode, str] | None = None
        self.reply_body = bytearray()
        self.reply_overflow = False  # the reply copy did not fit the held budget
        self.reply: Message | None = None  # the runtime's reply, as forward returned it
        self.forwarded = False
        self.task: asyncio.Task[None] | None = None
        self.finished = False  # the client has had its answer

    def complete(self) -> bool:
        """The runtime has completed the call: its held frames may go to the client."""
        return self.done.done()


class Observed:
    """A passed-through call whose reply is copied for its route's scan."""

    __slots__ = ("route", "sid", "reply", "reserved", "overflow", "held", "task", "settled")

    def __init__(self, route: ObserveRoute | ObserveStreamRoute, sid: int):
        self.route = route
        self.sid = sid
        self.reply = bytearray()  # the reply's DATA payloads
        self.reserved = 0  # bytes of the relay's held budget the copy holds
        self.overflow = False  # the copy did not fit the held budget: not scanned
        self.held: list[bytes] = []  # the final frames, while the scan's awaitable runs
        self.task: asyncio.Task[None] | None = None
        self.settled = False  # the held frames may go to the client

    def complete(self) -> bool:
        return self.settled


class ObservedStream(Observed):
    """A passed-through server-streamed call whose reply messages are read one by one as
    they pass: `reply` holds only the part of a message that came so far. `overflow`:
    a message could not be read (too large for the held budget or the message limit,
    compressed, or the reading failed on it): the stream is no longer read, and its
    reading is never completed. `dumped`: the call's dump, when it is dumped too."""

    __slots__ = ("reading", "dumped")

    def __init__(self, route: ObserveStreamRoute, sid: int, reading: StreamReading, dumped: Dumped | None):
        super().__init__(route, sid)
        self.reading = reading
        self.dumped = dumped


# The state of a stream the relay looks into (Connection.streams); an ObservedStream is an Observed.
StreamState: TypeAlias = Dumped | Intercepted | Observed


def is_one_message(data: bytes | bytearray) -> bool:
    """True if a unary call's body is one uncompressed gRPC message."""
    return len(data) >= 5 and data[0] == 0 and len(data) == 5 + int.from_bytes(data[1:5], "big")


def message_body(data: bytes | bytearray) -> bytes | None:
    """The one uncompressed message of a unary call's body, or None."""
    return bytes(data[5:]) if is_one_message(data) else None
