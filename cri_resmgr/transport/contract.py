"""The contract between a transport and whatever decides and observes.

Both transports (gRPC: `grpcrelay`, HTTP/2 frames: `framerelay`) and the layers
above them meet only here, so neither transport imports the other and the
engine does not know which one runs.

Interception: the transport looks a call's short method name (e.g.
"CreateContainer") up in a name-keyed table. No entry: the call is relayed as
raw bytes and never parsed. An entry: the transport decodes the request (with
runtime.v1 classes, as v1alpha2 is wire-identical), awaits the interceptor, and
encodes what it returns.

Dumping: a `DumpSink` is asked once per method path whether it wants the path's
messages; if so it gets copies of them and the call's final status.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import grpc
from google.protobuf.message import Message

from cri_resmgr.buckets import HistogramSnapshot
from cri_resmgr.errors import CriResmgrError

_log = logging.getLogger(__name__)

# Sends a (possibly rewritten) request to the runtime on the caller's path,
# metadata and deadline; returns the decoded reply or raises grpc.aio.AioRpcError.
Forward = Callable[[Message], Awaitable[Message]]


@dataclass(frozen=True)
class Request:
    name: str  # short method name: "CreateContainer"
    path: str  # the path the client called: "/runtime.v1alpha2.RuntimeService/CreateContainer"
    message: Message
    forward: Forward


Interceptor = Callable[[Request], Awaitable[Message]]
InterceptionTable = Mapping[str, Interceptor]

# Reads a reply's serialized message (bytes, or a view of the relay's copy that is
# valid during the call only); returns None, or what the call's final status waits for.
ReplyScan = Callable[[bytes | memoryview], Awaitable[None] | None]


class ReplyObserver:
    """An interception-table entry that only reads the runtime's reply (crash detection
    reads ListContainers and ContainerStatus replies for exited containers).

    The frame transport knows it: the call passes through unread, `scan` gets the
    reply's message as it came, and the final status waits only if `scan` returns
    an awaitable. Any other transport calls it as an interceptor: forward
    unchanged, scan the reply re-serialized, return it. Either way the call is
    never failed by the scan or its work: an error there is logged.
    """

    def __init__(self, scan: ReplyScan):
        self.scan = scan

    async def __call__(self, req: Request) -> Message:
        reply = await req.forward(req.message)
        try:
            pending = self.scan(reply.SerializeToString())
            if pending is not None:
                await pending
        except Exception as e:
            _log.error("observer of %s failed: %s: %s", req.path, type(e).__name__, e)
        return reply


class StreamReading(Protocol):
    """One server-streamed reply as a `StreamObserver` reads it, message by message."""

    def message(self, data: bytes | memoryview) -> None:
        """One message of the reply, as the runtime sent it (a view of the relay's copy,
        valid during the call only). The message is on its way to the client already."""

    def complete(self) -> Awaitable[None] | None:
        """The stream ended with OK, every message read: what its final status waits for
        (None: nothing). Never called for a stream that failed, was reset or cancelled, or
        held a message that could not be read: what was read of it is dropped, as kubelet
        drops a partial listing."""


class StreamObserver:
    """An interception-table entry that reads a server-streamed reply as it passes (crash
    detection reads StreamContainers, KEP-5825's streamed ListContainers).

    Both transports know it: the call passes through, each reply message goes on at
    once and `start()`'s reading gets it too; only the final status waits, and only if
    `complete` returns an awaitable. Neither holds the stream back nor keeps it whole.
    Anything else calls it as an interceptor (the simulator, with one recorded reply):
    forward unchanged, read the reply as the stream's one message, complete, return it.
    Either way the call is never failed by the reading or its work: an error is logged.
    """

    def __init__(self, start: Callable[[], StreamReading]):
        self.start = start

    async def __call__(self, req: Request) -> Message:
        reply = await req.forward(req.message)
        try:
            reading = self.start()
            reading.message(reply.SerializeToString())
            pending = reading.complete()
            if pending is not None:
                await pending
        except Exception as e:
            _log.error("observer of %s failed: %s: %s", req.path, type(e).__name__, e)
        return reply


class InterceptError(CriResmgrError):
    """Raised by an interceptor to fail the caller's request with a gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class DumpSink(Protocol):
    """Where a transport sends copies of the messages of the calls it is told to dump."""

    def wants(self, path: str) -> bool: ...
    def request(self, path: str, call_id: int, data: bytes) -> None: ...
    def reply(self, path: str, call_id: int, data: bytes | None, latency: float,
              code: grpc.StatusCode | None = None, details: str = "") -> None: ...


class Unchanged(enum.Enum):
    """The type of UNCHANGED. An enum rather than a bare object() so type checkers
    can tell "keep what is in force" from a real value, None included."""

    UNCHANGED = "unchanged"


# reconfigure's default: keep what is in force. None is a value (no dumper).
UNCHANGED: Final = Unchanged.UNCHANGED
Keep = Literal[Unchanged.UNCHANGED]


@dataclass(frozen=True)
class MethodCalls:
    """One method's relayed calls, for metrics (see `callstats.py`)."""

    method: str  # short method name, "unknown" for a path outside the method table
    intercepted: bool
    latency: HistogramSnapshot  # from the request's headers to the call's end, as the relay saw them
    errors: Mapping[str, int]  # the runtime's non-OK gRPC status name -> calls


@dataclass(frozen=True)
class TransportStats:
    """What a transport counts, as a snapshot for metrics at scrape time."""

    runtime_up: bool | None  # as its runtime connections last found it; None: not tracked
    calls: tuple[MethodCalls, ...] = ()  # empty unless the transport was built to time calls


class Transport(Protocol):
    """What the front end and the engine's controller need from a transport.

    Both `grpcrelay.GrpcRelay` and `framerelay.relay.FrameRelay` satisfy it.
    """

    async def start(self) -> None:
        """Binds the relay socket and serves."""

    async def stop(self, grace: float = 5.0) -> None:
        """Stops accepting, gives in-flight calls `grace` seconds, removes the socket."""

    async def wait(self) -> None:
        """Returns when the server has stopped."""

    def reconfigure(self, *, interceptors: InterceptionTable | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None:
        """Switches the interception table and/or the dumper for calls that start
        from now on; an argument left UNCHANGED keeps what is in force."""

    def runtime_probed(self, up: bool, why: str = "") -> None:
        """What the front end's own probe of the runtime found: `runtime_up` follows the
        runtime even while no call passes (logged once per transition, as for calls)."""

    def stats(self) -> TransportStats:
        """A snapshot of the transport's counters; safe from another thread."""
