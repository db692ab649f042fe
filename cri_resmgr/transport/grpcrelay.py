"""The gRPC transport: serves CRI on a unix socket and forwards to the runtime.

Every call is relayed as raw bytes with its metadata and deadline, and the
runtime's status, details and trailing metadata come back unchanged. Only the
methods in the interception table are decoded. Handlers are built once per
method path and cached; `reconfigure` drops the cache so new calls see a new
table or dumper.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar, cast

import grpc
from google.protobuf.message import Message

from cri_resmgr.transport import sockets
from cri_resmgr.transport.callstats import CallStats
from cri_resmgr.transport.contract import (
    UNCHANGED,
    DumpSink,
    InterceptError,
    InterceptionTable,
    Interceptor,
    Keep,
    Request,
    StreamObserver,
    StreamReading,
    TransportStats,
)
from cri_resmgr.transport.methods import Method, MethodTable, split_path
from cri_resmgr.transport.refusals import FailureLog, decode_request, in_kubelets_words
from cri_resmgr.transport.upstream import MAX_MESSAGE_BYTES, Upstream

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # grpc's classes are generic in the stubs only
    from collections.abc import Awaitable, Callable

    # Every call crosses as raw bytes: no (de)serializers on either side.
    _Context: TypeAlias = grpc.aio.ServicerContext[bytes, bytes]
    _Handler: TypeAlias = grpc.RpcMethodHandler[bytes, bytes]
    _ReplyStream: TypeAlias = grpc.aio.UnaryStreamCall[bytes, bytes] | grpc.aio.StreamStreamCall[bytes, bytes]
    _Unary: TypeAlias = Callable[[bytes, _Context], Awaitable[bytes]]
    _UnaryStream: TypeAlias = Callable[[bytes, _Context], Awaitable[None]]
    _Stream: TypeAlias = Callable[[AsyncIterator[bytes], _Context], Awaitable[None]]
    _H = TypeVar("_H", _Unary, _UnaryStream, _Stream)

SERVER_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Two relays binding the same socket would split kubelet's calls.
    ("grpc.so_reuseport", 0),
)

# Metadata that gRPC itself sets on the upstream call; forwarding would duplicate it.
_HOP_METADATA = frozenset({"user-agent", "content-type", "te", "grpc-accept-encoding",
                           "grpc-encoding", "grpc-timeout", "authority", "host"})


def _metadata(context: _Context) -> tuple[tuple[str, str | bytes], ...]:
    md = context.invocation_metadata()
    if not md:
        return ()
    return tuple((k, v) for k, v in md if k not in _HOP_METADATA and not k.startswith(":"))


async def _abort(context: _Context, e: grpc.aio.AioRpcError) -> NoReturn:
    # Trailing metadata must be a tuple here, or grpc.aio turns every upstream
    # error into UNKNOWN.
    await context.abort(e.code(), in_kubelets_words(e.code(), e.details() or ""),
                        tuple(e.trailing_metadata() or ()))


async def _stream_replies(call: _ReplyStream, context: _Context, path: str, call_id: int, t0: float,
                          dumper: DumpSink | None, reading: StreamReading | None = None,
                          failures: FailureLog | None = None) -> None:
    """Writes an upstream call's streamed replies, then passes on its status and trailers.
    `reading`: each reply also goes to it (a StreamObserver's), and it is completed, the
    status waiting for its work, only when the stream ends with OK."""
    try:
        async for item in call:
            if dumper is not None:
                dumper.reply(path, call_id, item, time.perf_counter() - t0)
            if reading is not None:
                try:
                    reading.message(item)
                except Exception as e:  # a bug in the reading: the call goes on, no longer read
                    _reading_failed(failures, path, e)
                    reading = None
            await context.write(item)
    except grpc.aio.AioRpcError as e:
        if dumper is not None:
            dumper.reply(path, call_id, None, time.perf_counter() - t0, e.code(), e.details() or "")
        await _abort(context, e)
    finally:
        call.cancel()  # a no-op once finished; stops the upstream if our caller went away
    if dumper is not None:
        dumper.reply(path, call_id, None, time.perf_counter() - t0, grpc.StatusCode.OK)
    if reading is not None:
        try:
            pending = reading.complete()
            if pending is not None:
                # Shielded: the engine's release is not cut short if kubelet gives up meanwhile.
                await asyncio.shield(asyncio.ensure_future(pending))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            _reading_failed(failures, path, e)
    trailing = await call.trailing_metadata()
    if trailing:
        context.set_trailing_metadata(tuple(trailing))


def _reading_failed(failures: FailureLog | None, path: str, e: Exception) -> None:
    if failures is not None:
        failures.failed(path, e)


class GrpcRelay:
    """Serves RuntimeService and ImageService (all versions) on one socket."""

    def __init__(self, socket_path: str, runtime: Upstream | None, image: Upstream | None,
                 methods: MethodTable, interceptors: InterceptionTable | None = None,
                 dumper: DumpSink | None = None, socket_like: str | None = None,
                 runtime_enabled: bool = True, timed: bool = False):
        self.socket_path = sockets.strip_scheme(socket_path)
        # Per-method latencies and errors, only when metrics are served (as FrameRelay).
        self.calls = CallStats() if timed else None
        self.runtime = runtime if runtime_enabled else None
        self.image = image
        self.methods = methods
        self._interceptors: InterceptionTable = interceptors or {}
        self._dumper = dumper
        self._socket_like = socket_like
        self._handlers: dict[str, _Handler | None] = {}  # known methods only, so bounded
        self._call_ids = itertools.count(1)
        self._failures = FailureLog(log)
        self._server: grpc.aio.Server | None = None
        self._watchers: list[asyncio.Future[None]] = []  # Upstream.watch, one per runtime socket

    # -- configuration -------------------------------------------------------

    def reconfigure(self, *, interceptors: InterceptionTable | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None:
        """See contract.Transport.reconfigure."""
        if interceptors is not UNCHANGED:
            self._interceptors = interceptors
        if dumper is not UNCHANGED:
            self._dumper = dumper
        self._handlers = {}  # handlers bind the table and dumper they were built with

    def runtime_probed(self, up: bool, why: str = "") -> None:
        """See contract.Transport.runtime_probed."""
        primary = self.runtime or self.image
        if primary is not None:
            primary.mark(up, why)

    def stats(self) -> TransportStats:
        primary = self.runtime or self.image
        return TransportStats(primary.up if primary is not None else None,
                              self.calls.snapshot() if self.calls is not None else ())

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        sockets.prepare(self.socket_path)
        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_generic_rpc_handlers((_Lookup(self),))
        # Tight umask so the socket is never briefly world-accessible before chmod.
        old = os.umask(0o177)
        try:
            server.add_insecure_port("unix://" + self.socket_path)
            await server.start()
        finally:
            os.umask(old)
        sockets.secure(self.socket_path, like=self._socket_like)
        self._server = server
        upstreams = {id(u): u for u in (self.runtime, self.image) if u is not None}
        self._watchers = [asyncio.ensure_future(u.watch()) for u in upstreams.values()]
        log.info("relay serving on %s", self.socket_path)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, give in-flight calls `grace` seconds, remove the socket."""
        for watcher in self._watchers:
            watcher.cancel()
        self._watchers = []
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        sockets.remove(self.socket_path)

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    # -- handler construction -------------------------------------------------

    def handler(self, path: str) -> _Handler | None:
        try:
            return self._handlers[path]
        except KeyError:
            h = self._build(path)
            if self.methods.lookup(path) is not None:  # a client's made-up paths are not kept
                self._handlers[path] = h
            return h

    def _upstream_for(self, path: str) -> Upstream | None:
        service, _ = split_path(path)
        return self.image if service.endswith("ImageService") else self.runtime

    def _build(self, path: str) -> _Handler | None:
        upstream = self._upstream_for(path)
        if upstream is None:
            return None  # service disabled: gRPC answers UNIMPLEMENTED
        method = self.methods.lookup(path)
        dumper = self._dumper if self._dumper is not None and self._dumper.wants(path) else None
        name = method.name if method is not None else None
        if method is None or method.client_streaming:
            # Unknown shape: a bidi stream relays any of the four kinds on the wire.
            return grpc.stream_stream_rpc_method_handler(
                self._timed(self._stream_passthrough(path, upstream, dumper), name, False))
        interceptor = self._interceptors.get(method.name)
        if method.server_streaming:
            observer = interceptor if isinstance(interceptor, StreamObserver) else None
            return grpc.unary_stream_rpc_method_handler(
                self._timed(self._unary_stream_passthrough(path, upstream, dumper, observer), name,
                            observer is not None))
        if interceptor is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._timed(self._intercepted(path, method, interceptor, upstream, dumper), name, True))
        return grpc.unary_unary_rpc_method_handler(
            self._timed(self._unary_passthrough(path, upstream, dumper), name, False))

    def _timed(self, handler: _H, method: str | None, intercepted: bool) -> _H:
        """`handler`, counting each call's latency and non-OK status when metrics are served."""
        if self.calls is None:
            return handler
        stats = self.calls.method(method, intercepted)
        clock = time.perf_counter_ns

        async def timed(request: Any, context: _Context) -> Any:
            t0 = clock()
            try:
                return await handler(request, context)
            finally:
                stats.latency.observe_ns(clock() - t0)
                code = context.code()
                if isinstance(code, grpc.StatusCode) and code != grpc.StatusCode.OK:
                    stats.error(code)

        return cast("_H", timed)

    def _unary_passthrough(self, path: str, upstream: Upstream, dumper: DumpSink | None) -> _Unary:
        mc = upstream.unary(path)
        ids = self._call_ids

        async def relay_unary(request: bytes, context: _Context) -> bytes:
            if dumper is not None:
                call_id = next(ids)
                dumper.request(path, call_id, request)
                t0 = time.perf_counter()
            call = mc(request, metadata=_metadata(context), timeout=context.time_remaining())
            try:
                reply = await call
            except grpc.aio.AioRpcError as e:
                if dumper is not None:
                    dumper.reply(path, call_id, None, time.perf_counter() - t0, e.code(), e.details() or "")
                await _abort(context, e)
            except asyncio.CancelledError:
                call.cancel()  # the caller went away: so does the runtime call
                raise
            if dumper is not None:
                dumper.reply(path, call_id, reply, time.perf_counter() - t0)
            trailing = await call.trailing_metadata()
            if trailing:
                context.set_trailing_metadata(tuple(trailing))
            return reply

        return relay_unary

    def _unary_stream_passthrough(self, path: str, upstream: Upstream, dumper: DumpSink | None,
                                  observer: StreamObserver | None = None) -> _UnaryStream:
        mc = upstream.unary_stream(path)
        ids = self._call_ids
        failures = self._failures

        async def relay_unary_stream(request: bytes, context: _Context) -> None:
            call_id = next(ids)
            if dumper is not None:
                dumper.request(path, call_id, request)
            t0 = time.perf_counter()
            reading = None
            if observer is not None:
                try:
                    reading = observer.start()
                except Exception as e:  # a bug in the observer: the call goes on unread
                    failures.failed(path, e)
            call = mc(request, metadata=_metadata(context), timeout=context.time_remaining())
            await _stream_replies(call, context, path, call_id, t0, dumper, reading, failures)

        return relay_unary_stream

    def _stream_passthrough(self, path: str, upstream: Upstream, dumper: DumpSink | None) -> _Stream:
        ids = self._call_ids

        async def relay_stream(requests: AsyncIterator[bytes], context: _Context) -> None:
            call_id = next(ids)
            t0 = time.perf_counter()
            # The caller's messages are read up to its half-close first (CRI has
            # no bidirectional RPCs, so nobody waits on early replies). One
            # message, the usual case, goes upstream as unary-stream, which is
            # the same on the wire for unary and server-streaming methods: the
            # aio client's stream-stream call turns a quick upstream error into
            # INTERNAL "error from Core" on nearly half the calls (grpcio 1.85).
            sent: list[bytes] = []
            async for item in requests:
                if dumper is not None:
                    dumper.request(path, call_id, item)
                sent.append(item)
            metadata, timeout = _metadata(context), context.time_remaining()
            call: _ReplyStream
            if len(sent) == 1:
                call = upstream.unary_stream(path)(sent[0], metadata=metadata, timeout=timeout)
            else:
                call = upstream.stream_stream(path)(iter(sent), metadata=metadata, timeout=timeout)
            await _stream_replies(call, context, path, call_id, t0, dumper)

        return relay_stream

    def _intercepted(self, path: str, method: Method, interceptor: Interceptor, upstream: Upstream,
                     dumper: DumpSink | None) -> _Unary:
        mc = upstream.unary(path)
        ids = self._call_ids
        failures = self._failures
        # v1alpha2 is wire-identical to v1: interceptors only ever see v1 types.
        v1 = self.methods.lookup(f"/runtime.v1.{split_path(path)[0].rpartition('.')[2]}/{method.name}") or method
        request_type, reply_type = v1.request, v1.response

        async def relay_intercepted(request: bytes, context: _Context) -> bytes:
            call_id = next(ids)
            if dumper is not None:
                dumper.request(path, call_id, request)
            t0 = time.perf_counter()
            metadata = _metadata(context)
            timeout = context.time_remaining()

            async def forward(message: Message) -> Message:
                data = await mc(message.SerializeToString(), metadata=metadata, timeout=timeout)
                return reply_type.FromString(data)

            try:
                message = decode_request(request_type, method.name, request)
            except InterceptError as e:
                failures.refused(path, e.message)
                if dumper is not None:
                    dumper.reply(path, call_id, None, time.perf_counter() - t0, e.code, e.message)
                await context.abort(e.code, e.message)
            try:
                reply = (await interceptor(Request(method.name, path, message, forward))).SerializeToString()
            except grpc.aio.AioRpcError as e:
                if dumper is not None:
                    dumper.reply(path, call_id, None, time.perf_counter() - t0, e.code(), e.details() or "")
                await _abort(context, e)
            except InterceptError as e:
                if dumper is not None:
                    dumper.reply(path, call_id, None, time.perf_counter() - t0, e.code, e.message)
                await context.abort(e.code, e.message)
            except Exception as e:  # a bug in the interceptor: one line, not gRPC's traceback per call
                failures.failed(path, e)
                if dumper is not None:
                    dumper.reply(path, call_id, None, time.perf_counter() - t0, grpc.StatusCode.INTERNAL, str(e))
                await context.abort(grpc.StatusCode.INTERNAL, f"cri-resmgr: {e}")
            if dumper is not None:
                dumper.reply(path, call_id, reply, time.perf_counter() - t0)
            return reply

        return relay_intercepted


class _Lookup(grpc.GenericRpcHandler):
    """gRPC asks this for every call; the relay answers from its handler cache."""

    def __init__(self, relay: GrpcRelay):
        self._relay = relay

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> _Handler | None:
        return self._relay.handler(handler_call_details.method)
