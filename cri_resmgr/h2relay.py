"""The frame relay: CRI relayed as HTTP/2 frames, with no gRPC stack in between.

Each connection from kubelet gets one connection to the runtime, and frames
pass between the two as they come, so settings, flow control, pings and
header compression stay between kubelet and the runtime. The relay reads only
what it must:

* the `:path` of each new call, to look its route up (cached per path);
* for a call the policy intercepts, the request body (held back, decoded,
  handed to the interceptor, re-encoded and sent on the same stream) and a
  copy of the runtime's reply; the reply's final status is held back until
  the interceptor is done, so the client's call completes after the policy's
  bookkeeping, and is then passed on unchanged (or replaced by the
  interceptor's error);
* for a dumped call, copies of its messages and its final status.

Both ends are told (through the SETTINGS frames passing by) to use no HPACK
dynamic table, so a header block the relay holds back or answers itself cannot
desynchronise the peers' decoders. The reply direction is never altered in
size. In the request direction, bytes the relay swallows are given back to the
client with WINDOW_UPDATE, bytes a rewrite adds are taken off the runtime's
next grants to the client, and nothing is sent beyond the runtime's real
window (the relay tracks it and waits for grants).

If the runtime cannot be reached when kubelet connects, the relay answers every
call with UNAVAILABLE and, once the runtime is back, sends GOAWAY so kubelet
reconnects straight away.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from typing import Any

import grpc

from cri_resmgr import h2frames as h2
from cri_resmgr import sockets
from cri_resmgr.criapi import Method, MethodTable, split_path
from cri_resmgr.headerblock import BlockError, Reader
from cri_resmgr.intercept import InterceptError, InterceptionTable, Request
from cri_resmgr.relay import DumpSink

log = logging.getLogger(__name__)

_PATH = frozenset({b":path"})
_STATUS = frozenset({b"grpc-status", b"grpc-message"})
_RETRY_CONNECT_SECONDS = 0.5
_TOMBSTONES = 1024


class UpstreamError(grpc.aio.AioRpcError):
    """An intercepted call's forward failed, as the interceptor sees it.

    `from_runtime`: the runtime's own status (passed on to the client as the
    runtime sent it); otherwise the relay could not complete the call.
    """

    def __init__(self, code: grpc.StatusCode, details: str, from_runtime: bool = True):
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)
        self.from_runtime = from_runtime


# -- routes: what the relay does with a method path ----------------------------------

PASS, DUMP, INTERCEPT, REFUSE = range(4)


class Route:
    __slots__ = ("kind", "path", "method", "dumper", "interceptor", "request_type", "reply_type",
                 "streaming", "refusal")

    def __init__(self, kind: int, path: str, method: Method | None = None, dumper: DumpSink | None = None,
                 interceptor: Any = None, refusal: str = ""):
        self.kind = kind
        self.path = path
        self.method = method
        self.dumper = dumper
        self.interceptor = interceptor
        self.streaming = method is None or method.server_streaming or method.client_streaming
        self.refusal = refusal
        self.request_type = self.reply_type = None


class FrameRelay:
    """Serves CRI on a unix socket, relaying frames to one runtime socket."""

    def __init__(self, socket_path: str, upstream_path: str, methods: MethodTable,
                 interceptors: InterceptionTable | None = None, dumper: DumpSink | None = None,
                 socket_like: str | None = None, runtime_enabled: bool = True, image_enabled: bool = True):
        self.socket_path = sockets.strip_scheme(socket_path)
        self.upstream_path = sockets.strip_scheme(upstream_path)
        self.methods = methods
        self._interceptors: InterceptionTable = interceptors or {}
        self._dumper = dumper
        self._socket_like = socket_like
        self._enabled = {"RuntimeService": runtime_enabled, "ImageService": image_enabled}
        self._routes: dict[bytes, Route] = {}
        self._call_ids = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[_Connection] = set()

    # -- configuration -------------------------------------------------------------

    def reconfigure(self, interceptors: InterceptionTable | None = None,
                    dumper: DumpSink | None = None, *, set_dumper: bool = False) -> None:
        if interceptors is not None:
            self._interceptors = interceptors
        if set_dumper:
            self._dumper = dumper
        self._routes = {}

    def route(self, raw_path: bytes) -> Route:
        r = self._routes.get(raw_path)
        if r is None:
            r = self._routes[raw_path] = self._build(raw_path.decode("utf-8", "replace"))
        return r

    def _build(self, path: str) -> Route:
        service = split_path(path)[0].rpartition(".")[2]
        if not self._enabled.get(service, True):
            return Route(REFUSE, path, refusal=f"cri-resmgr: the {service} is disabled on this relay")
        method = self.methods.lookup(path)
        dumper = self._dumper if self._dumper is not None and self._dumper.wants(path) else None
        interceptor = None
        if method is not None and not (method.server_streaming or method.client_streaming):
            interceptor = self._interceptors.get(method.name)
        if interceptor is None:
            return Route(DUMP if dumper is not None else PASS, path, method, dumper)
        r = Route(INTERCEPT, path, method, dumper, interceptor)
        # v1alpha2 is wire-identical to v1: interceptors only ever see v1 types.
        v1 = self.methods.lookup(f"/runtime.v1.{split_path(path)[0].rpartition('.')[2]}/{method.name}") or method
        r.request_type, r.reply_type = v1.request, v1.response
        return r

    def call_id(self) -> int:
        return next(self._call_ids)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        sockets.prepare(self.socket_path)
        loop = asyncio.get_running_loop()
        old = os.umask(0o177)  # the socket is never briefly world-accessible
        try:
            self._server = await loop.create_unix_server(lambda: _ClientSide(self), self.socket_path)
        finally:
            os.umask(old)
        sockets.secure(self.socket_path, like=self._socket_like)
        log.info("relay serving on %s (frame transport)", self.socket_path)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight calls finish within `grace`, remove the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for c in list(self.connections):
            c.drain()
        deadline = time.monotonic() + grace
        while any(c.busy() for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for c in list(self.connections):
            c.close()
        sockets.remove(self.socket_path)

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_closed()


# -- the two sides of a connection ------------------------------------------------------

class _Out:
    """Writes to one side. Frames the relay makes itself wait while a header
    block being passed through is unfinished: a block's frames must be contiguous."""

    __slots__ = ("transport", "midblock", "pending")

    def __init__(self, transport: asyncio.Transport):
        self.transport = transport
        self.midblock = False
        self.pending: list[bytes] = []

    def relay(self, data: bytes, midblock: bool) -> None:
        self.transport.write(data)
        self.midblock = midblock
        if not midblock and self.pending:
            self.transport.write(b"".join(self.pending))
            self.pending.clear()

    def send(self, data: bytes) -> None:
        if self.midblock:
            self.pending.append(data)
        else:
            self.transport.write(data)


class _ClientSide(asyncio.Protocol):
    """kubelet's connection to the relay."""

    def __init__(self, relay: FrameRelay):
        self.relay = relay
        self.conn: _Connection | None = None
        self.transport: asyncio.Transport | None = None
        self._connecting: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.pause_reading()  # until the runtime side is connected
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            runtime, _ = await loop.create_unix_connection(_RuntimeSide, self.relay.upstream_path)
        except OSError as e:
            if self.transport.is_closing():
                return
            log.warning("runtime at %s unreachable (%s): answering UNAVAILABLE until it is back",
                        self.relay.upstream_path, e)
            self.conn = _Unreachable(self.relay, self.transport, str(e))
        else:
            if self.transport.is_closing():
                runtime.transport.close()
                return
            self.conn = _Connection(self.relay, self.transport, runtime)
        self.relay.connections.add(self.conn)
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.conn.from_client(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conn.client_lost()

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_runtime(True)

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_runtime(False)


class _RuntimeSide(asyncio.Protocol):
    """The relay's connection to the runtime, paired with one client connection."""

    def __init__(self) -> None:
        self.conn: _Connection | None = None
        self.transport: asyncio.Transport | None = None
        self.early = bytearray()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.conn is None:
            self.early += data
        else:
            self.conn.from_runtime(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.conn is not None:
            self.conn.runtime_lost()

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_client(True)

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.pause_client(False)


# -- per-stream state for the calls the relay looks into ----------------------------------

class _Dumped:
    __slots__ = ("route", "call_id", "t0", "requests", "replies", "bodies")

    def __init__(self, route: Route, call_id: int):
        self.route = route
        self.call_id = call_id
        self.t0 = time.perf_counter()
        self.requests = h2.MessageSplitter()
        self.replies = h2.MessageSplitter()
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


class _Refused:
    """A call the relay answered itself: frames either way are dropped."""

    __slots__ = ()


class _Intercepted:
    __slots__ = ("route", "sid", "call_id", "t0", "body", "swallowed", "window", "held", "headers_sent",
                 "done", "reset", "status", "reply_body", "reply", "forwarded", "task", "finished")

    def __init__(self, route: Route, sid: int, call_id: int, window: int):
        self.route = route
        self.sid = sid
        self.call_id = call_id
        self.t0 = time.perf_counter()
        self.body = bytearray()  # the request as the client sent it
        self.swallowed = 0  # flow-controlled bytes taken from the client and not passed on
        self.window = window  # the runtime's stream window for what the relay sends
        self.held: list[bytes] = []  # the runtime's final frames (trailers or RST_STREAM)
        self.headers_sent = False  # the runtime's response headers went to the client
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.reset = False  # the runtime reset the stream
        self.status: tuple[grpc.StatusCode, str] | None = None
        self.reply_body = bytearray()
        self.reply: Any = None
        self.forwarded = False
        self.task: asyncio.Task | None = None
        self.finished = False  # the client has had its answer


# -- a relayed connection ---------------------------------------------------------------

class _Connection:
    """One kubelet connection and its runtime connection, frame by frame."""

    def __init__(self, relay: FrameRelay, client: asyncio.Transport, runtime_transport: asyncio.Transport):
        self.relay = relay
        self.client = _Out(client)
        self.runtime_transport = runtime_transport
        self.runtime = _Out(runtime_transport)
        self.cbuf = bytearray()
        self.rbuf = bytearray()
        self.preface = False
        self.creader = Reader()  # the client's header blocks
        self.rreader = Reader()  # the runtime's header blocks
        self.cblock: tuple[int, int, bytearray] | None = None  # (stream, flags, fragments) being read
        self.rblock: tuple[int, int, bytearray, list[bytes]] | None = None
        self.open: set[int] = set()
        self.streams: dict[int, Any] = {}
        self.dropped: dict[int, None] = {}  # streams whose runtime frames are discarded
        self.last_stream = 0
        self.runtime_window = h2.DEFAULT_WINDOW  # connection window for what goes to the runtime
        self.runtime_initial_window = h2.DEFAULT_WINDOW
        self.runtime_max_frame = h2.DEFAULT_MAX_FRAME
        self.grant_debt = 0  # bytes to take off the runtime's next WINDOW_UPDATEs to the client
        self.granted = asyncio.Event()
        self._ready: list[_Intercepted] = []  # answered calls whose replies go out in order
        self.blocked = False  # client frames wait for the runtime's window
        self.closed = False
        self.draining = False
        side: _RuntimeSide = runtime_transport.get_protocol()  # type: ignore[assignment]
        side.conn = self
        if side.early:
            self.from_runtime(bytes(side.early))
            side.early.clear()
        if side.lost:
            self.runtime_lost()

    # -- bookkeeping -------------------------------------------------------------------

    def busy(self) -> bool:
        return not self.closed and bool(self.open)

    def drain(self) -> None:
        """No new calls: tell the client, let the open ones finish."""
        if not self.draining and not self.closed:
            self.draining = True
            self.client.send(h2.goaway(self.last_stream))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.relay.connections.discard(self)
        self.client.transport.close()
        self.runtime_transport.close()
        for st in self.streams.values():
            if isinstance(st, _Intercepted):
                if not st.done.done():
                    st.done.set_result(None)
                if st.task is not None and not st.finished:
                    st.task.cancel()
        self.granted.set()

    def client_lost(self) -> None:
        self.close()

    def runtime_lost(self) -> None:
        if not self.closed:
            log.info("runtime connection closed: closing the client connection")
        self.close()

    def pause_runtime(self, pause: bool) -> None:
        if not self.closed:
            (self.runtime_transport.pause_reading if pause else self.runtime_transport.resume_reading)()

    def pause_client(self, pause: bool) -> None:
        if not self.closed:
            t = self.client.transport
            (t.pause_reading if pause else t.resume_reading)()

    def _fail(self, why: str) -> None:
        log.error("closing a client connection: %s", why)
        self.close()

    def _end(self, sid: int) -> None:
        self.open.discard(sid)
        self.streams.pop(sid, None)
        if self.draining and not self.open:
            self.close()

    def _drop_runtime_frames(self, sid: int) -> None:
        self.dropped[sid] = None
        if len(self.dropped) > _TOMBSTONES:
            for old in list(itertools.islice(self.dropped, len(self.dropped) - _TOMBSTONES)):
                del self.dropped[old]

    # -- client -> runtime --------------------------------------------------------------

    def from_client(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.cbuf
        buf += data
        pos = 0
        if self.blocked:
            return
        if not self.preface:
            if len(buf) < len(h2.PREFACE):
                return
            if bytes(buf[:len(h2.PREFACE)]) != h2.PREFACE:
                return self._fail("not an HTTP/2 client (bad connection preface)")
            self.preface = True
            pos = len(h2.PREFACE)
        n = len(buf)
        start = 0  # start of the run of frames passed through unchanged
        out: list[bytes] = []
        try:
            while n - pos >= 9:
                length = int.from_bytes(buf[pos:pos + 3], "big")
                end = pos + 9 + length
                if end > n:
                    break
                ftype, flags = buf[pos + 3], buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
                if ftype == h2.DATA:
                    st = self.streams.get(sid)
                    if st is None or isinstance(st, _Dumped):
                        if length > self.runtime_window:
                            # A rewrite made the client's idea of the window larger
                            # than the runtime's; wait for the runtime's grants.
                            self.blocked = True
                            break
                        self.runtime_window -= length
                        if st is not None:
                            st.request_data(h2.data_payload(flags, bytes(buf[pos + 9:end])))
                    else:
                        self._client_data(st, sid, flags, bytes(buf[pos + 9:end]), length)
                        out.append(bytes(buf[start:pos]))
                        start = end
                elif ftype == h2.HEADERS or ftype == h2.CONTINUATION:
                    extra = self._client_headers(ftype, flags, sid, bytes(buf[pos + 9:end]))
                    if extra:
                        out.append(bytes(buf[start:end]))
                        out.append(extra)
                        start = end
                elif ftype == h2.SETTINGS and not flags & h2.ACK:
                    out.append(bytes(buf[start:pos]))
                    out.append(h2.settings_frame(h2.without_header_table(bytes(buf[pos + 9:end]))))
                    start = end
                elif ftype == h2.RST_STREAM:
                    st = self.streams.get(sid)
                    if isinstance(st, _Refused):
                        out.append(bytes(buf[start:pos]))
                        start = end
                        self._end(sid)
                    else:
                        self._client_reset(sid, st)
                pos = end
        except (BlockError, ValueError, IndexError) as e:
            return self._fail(f"bad frame from the client: {e}")
        if start < pos:
            out.append(bytes(buf[start:pos]) if start or pos < n else bytes(buf))
        del buf[:pos]
        if out and not self.closed:
            self.runtime.relay(b"".join(out), self.cblock is not None)

    def _client_headers(self, ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
        """Reads a client header block; returns frames to send the runtime right after it."""
        fragment = h2.block_fragment(ftype, flags, payload)
        if ftype == h2.HEADERS:
            self.cblock = (sid, flags, bytearray(fragment))
        elif self.cblock is None:
            raise ValueError("CONTINUATION without HEADERS")
        else:
            self.cblock[2].extend(fragment)
        if not flags & h2.END_HEADERS:
            return b""
        sid, first_flags, block = self.cblock
        self.cblock = None
        fields = self.creader.read(bytes(block), _PATH)
        if sid in self.open or sid in self.streams:
            return b""  # the client's trailers
        if sid <= self.last_stream:
            return b""
        self.last_stream = sid
        path = fields.get(b":path")
        route = self.relay.route(path) if path is not None else None
        if route is None or route.kind == PASS:
            self.open.add(sid)
            return b""
        self.open.add(sid)
        if route.kind == DUMP:
            st = _Dumped(route, self.relay.call_id())
            self.streams[sid] = st
            return b""
        if route.kind == REFUSE:
            self.streams[sid] = _Refused()
            self._drop_runtime_frames(sid)
            self.client.send(h2.trailers_only(sid, grpc.StatusCode.UNIMPLEMENTED, route.refusal))
            return h2.rst_stream(sid)
        st = _Intercepted(route, sid, self.relay.call_id(), self.runtime_initial_window)
        self.streams[sid] = st
        if first_flags & h2.END_STREAM:
            self._start_interceptor(st)
        return b""

    def _client_data(self, st: Any, sid: int, flags: int, payload: bytes, length: int) -> None:
        """DATA the runtime does not get: a refused call's, or an intercepted request."""
        if isinstance(st, _Refused):
            if length:
                self.client.send(h2.window_update(0, length))
            return
        st.swallowed += length
        st.body += h2.data_payload(flags, payload)
        if flags & h2.END_STREAM:
            self._start_interceptor(st)

    def _client_reset(self, sid: int, st: Any) -> None:
        """The client gave up on a call: the runtime is told (the frame goes on)."""
        if isinstance(st, _Intercepted):
            st.finished = True
            if st.task is not None:
                st.task.cancel()
            if st.swallowed and not st.forwarded:
                self.client.send(h2.window_update(0, st.swallowed))
            self._drop_runtime_frames(sid)
        elif isinstance(st, _Dumped):
            st.finish(grpc.StatusCode.CANCELLED, "cancelled by the client")
        self._end(sid)

    # -- runtime -> client --------------------------------------------------------------

    def from_runtime(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.rbuf
        buf += data
        n = len(buf)
        pos = start = 0
        out: list[bytes] = []
        try:
            while n - pos >= 9:
                length = int.from_bytes(buf[pos:pos + 3], "big")
                end = pos + 9 + length
                if end > n:
                    break
                ftype, flags = buf[pos + 3], buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
                keep = True
                if ftype == h2.DATA:
                    st = self.streams.get(sid)
                    if st is not None or sid in self.dropped:
                        keep = self._runtime_data(st, sid, flags, bytes(buf[pos:end]), length)
                    elif flags & h2.END_STREAM:
                        self._end(sid)
                elif ftype == h2.HEADERS or ftype == h2.CONTINUATION:
                    keep = self._runtime_headers(ftype, flags, sid, bytes(buf[pos:end]))
                elif ftype == h2.WINDOW_UPDATE:
                    increment = int.from_bytes(buf[pos + 9:pos + 13], "big") & 0x7FFFFFFF
                    if sid == 0:
                        self.runtime_window += increment
                        self.granted.set()
                        if self.grant_debt:  # the client's share is smaller by what the relay added
                            out.append(bytes(buf[start:pos]))
                            start = end
                            granted = increment - self.grant_debt
                            self.grant_debt = max(0, -granted)
                            if granted > 0:
                                out.append(h2.window_update(0, granted))
                    else:
                        st = self.streams.get(sid)
                        if isinstance(st, _Intercepted):
                            st.window += increment
                            self.granted.set()
                        keep = not (isinstance(st, _Refused) or sid in self.dropped)
                elif ftype == h2.RST_STREAM:
                    st = self.streams.get(sid)
                    if st is not None or sid in self.dropped:
                        keep = self._runtime_reset(st, sid, bytes(buf[pos:end]))
                    else:
                        self._end(sid)
                elif ftype == h2.SETTINGS and not flags & h2.ACK:
                    self._runtime_settings(bytes(buf[pos + 9:end]))
                    out.append(bytes(buf[start:pos]))
                    out.append(h2.settings_frame(h2.without_header_table(bytes(buf[pos + 9:end]))))
                    start = end
                    pos = end
                    continue
                if not keep:
                    out.append(bytes(buf[start:pos]))
                    start = end
                pos = end
        except (BlockError, ValueError, IndexError) as e:
            return self._fail(f"bad frame from the runtime: {e}")
        if start < pos:
            out.append(bytes(buf[start:pos]) if start or pos < n else bytes(buf))
        del buf[:pos]
        if out and not self.closed:
            self.client.relay(b"".join(out), self.rblock is not None and self.rblock[3] is None)
        self._flush_finished()
        if self.blocked and self.runtime_window > 0:
            self.blocked = False
            self.from_client(b"")

    def _runtime_headers(self, ftype: int, flags: int, sid: int, frame: bytes) -> bool:
        fragment = h2.block_fragment(ftype, flags, frame[9:])
        if ftype == h2.HEADERS:
            st = self.streams.get(sid)
            if isinstance(st, _Intercepted) and not st.finished:
                holder = st.held if flags & h2.END_STREAM else None
                st.headers_sent = st.headers_sent or holder is None
            elif isinstance(st, (_Refused, _Intercepted)) or sid in self.dropped:
                holder = []
            else:
                holder = None
            self.rblock = (sid, flags, bytearray(fragment), holder)
        elif self.rblock is None:
            raise ValueError("CONTINUATION without HEADERS")
        else:
            self.rblock[2].extend(fragment)
        sid, first_flags, block, holder = self.rblock
        if holder is not None:
            holder.append(frame)
        if not flags & h2.END_HEADERS:
            return holder is None
        self.rblock = None
        st = self.streams.get(sid)
        wanted = _STATUS if first_flags & h2.END_STREAM and st is not None else frozenset()
        fields = self.rreader.read(bytes(block), wanted)
        if holder is not None and not self.rreader.table_empty:
            self._fail("the runtime's header compression ignores SETTINGS_HEADER_TABLE_SIZE=0; "
                       "cannot hold back its replies")
            return False
        status = None
        if first_flags & h2.END_STREAM:
            status = (h2.status_code(fields.get(b"grpc-status")), h2.status_message(fields.get(b"grpc-message")))
        if isinstance(st, _Intercepted) and not st.finished:
            if status is not None:
                st.status = status
                if not st.done.done():
                    st.done.set_result(None)
            return holder is None
        if holder is not None:  # refused or dropped
            if status is not None and isinstance(st, _Refused):
                self._end(sid)
            return False
        if status is not None:
            if isinstance(st, _Dumped):
                st.finish(*status)
            self._end(sid)
        return True

    def _runtime_data(self, st: Any, sid: int, flags: int, frame: bytes, length: int) -> bool:
        if isinstance(st, _Dumped):
            st.reply_data(h2.data_payload(flags, frame[9:]))
            if flags & h2.END_STREAM:
                st.finish(grpc.StatusCode.OK, "")
                self._end(sid)
            return True
        if isinstance(st, _Intercepted) and not st.finished:
            st.reply_body += h2.data_payload(flags, frame[9:])
            if flags & h2.END_STREAM and not st.done.done():
                st.done.set_result(None)  # no trailers: the client sees the end as it is
            return True
        if length:  # dropped: the runtime gets its window back
            self.runtime.send(h2.window_update(0, length))
        return False

    def _runtime_reset(self, st: Any, sid: int, frame: bytes) -> bool:
        if isinstance(st, _Dumped):
            st.finish(grpc.StatusCode.CANCELLED, "stream reset by the runtime")
            self._end(sid)
            return True
        if isinstance(st, _Intercepted) and not st.finished:
            st.held.append(frame)
            st.reset = True
            if not st.done.done():
                st.done.set_result(None)
            return False
        if isinstance(st, _Refused):
            self._end(sid)
        return False

    def _runtime_settings(self, payload: bytes) -> None:
        params = h2.settings_params(payload)
        if h2.SETTINGS_INITIAL_WINDOW_SIZE in params:
            delta = params[h2.SETTINGS_INITIAL_WINDOW_SIZE] - self.runtime_initial_window
            self.runtime_initial_window += delta
            for st in self.streams.values():
                if isinstance(st, _Intercepted):
                    st.window += delta
            self.granted.set()
        if h2.SETTINGS_MAX_FRAME_SIZE in params:
            self.runtime_max_frame = params[h2.SETTINGS_MAX_FRAME_SIZE]

    # -- intercepted calls ----------------------------------------------------------

    def _start_interceptor(self, st: _Intercepted) -> None:
        if st.route.dumper is not None:
            body = _message_body(st.body)
            st.route.dumper.request(st.route.path, st.call_id, body if body is not None else bytes(st.body))
        st.task = asyncio.ensure_future(self._intercept(st))

    async def _intercept(self, st: _Intercepted) -> None:
        route = st.route
        body = _message_body(st.body)
        try:
            if body is None:
                raise InterceptError(grpc.StatusCode.INTERNAL,
                                     "cri-resmgr: cannot read the request (compressed or malformed gRPC message)")
            request = Request(route.method.name, route.path, route.request_type.FromString(body),
                              lambda message: self._forward(st, message))
            result = await route.interceptor(request)
            if st.reply is None or result is not st.reply:
                raise InterceptError(grpc.StatusCode.INTERNAL,
                                     f"cri-resmgr: the {route.method.name} interceptor did not return the runtime's reply")
            self._dump_reply(st, grpc.StatusCode.OK, "", bytes(st.reply_body[5:]))
            self._pass_reply(st)
        except UpstreamError as e:
            self._dump_reply(st, e.code(), e.details() or "")
            if e.from_runtime:
                self._pass_reply(st)
            else:
                self._answer(st, e.code(), e.details() or "")
        except InterceptError as e:
            self._dump_reply(st, e.code, e.message)
            self._answer(st, e.code, e.message)
        except asyncio.CancelledError:
            self._release(st)
            raise
        except grpc.aio.AioRpcError as e:  # from a call the interceptor made elsewhere
            self._dump_reply(st, e.code(), e.details() or "")
            self._answer(st, e.code(), e.details() or "")
        except Exception as e:
            log.exception("interceptor for %s failed", route.path)
            self._dump_reply(st, grpc.StatusCode.INTERNAL, str(e))
            self._answer(st, grpc.StatusCode.INTERNAL, f"cri-resmgr: {e}")
        self._flush_finished()

    async def _forward(self, st: _Intercepted, message: Any) -> Any:
        if st.forwarded:
            raise RuntimeError("an intercepted call can be forwarded once")
        st.forwarded = True
        if not st.done.done():  # the runtime may already have answered (e.g. UNIMPLEMENTED)
            await self._send_request(st, h2.grpc_message(message.SerializeToString()))
        else:
            self._settle_request(st, 0)
        await st.done
        if self.closed:
            raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "cri-resmgr: connection to the runtime closed", False)
        if st.reset:
            raise UpstreamError(grpc.StatusCode.CANCELLED, "cri-resmgr: the runtime reset the call")
        code, details = st.status or (grpc.StatusCode.UNKNOWN, "no status from the runtime")
        if code != grpc.StatusCode.OK:
            raise UpstreamError(code, details)
        body = _message_body(st.reply_body)
        if body is None:
            raise UpstreamError(grpc.StatusCode.INTERNAL,
                                "cri-resmgr: cannot read the runtime's reply (compressed or malformed gRPC message)",
                                False)
        st.reply = st.route.reply_type.FromString(body)
        return st.reply

    async def _send_request(self, st: _Intercepted, data: bytes) -> None:
        self._settle_request(st, len(data))
        pos = 0
        while True:
            room = min(self.runtime_window, st.window, self.runtime_max_frame, len(data) - pos)
            if room <= 0 and pos < len(data):
                self.granted.clear()
                await self.granted.wait()
                if self.closed:
                    return
                continue
            chunk = data[pos:pos + room]
            pos += len(chunk)
            self.runtime_window -= len(chunk)
            st.window -= len(chunk)
            last = pos >= len(data)
            self.runtime.send(h2.frame(h2.DATA, h2.END_STREAM if last else 0, st.sid, chunk))
            if last:
                return

    def _settle_request(self, st: _Intercepted, sent: int) -> None:
        """The client spent `st.swallowed` of its window; the runtime sees `sent`."""
        diff = st.swallowed - sent
        st.swallowed = 0
        if diff > 0:
            self.client.send(h2.window_update(0, diff))
        elif diff < 0:
            self.grant_debt -= diff

    def _pass_reply(self, st: _Intercepted) -> None:
        """The runtime's reply goes to the client as it was sent."""
        if st.finished or self.closed:
            return
        st.finished = True
        self._ready.append(st)

    def _answer(self, st: _Intercepted, code: grpc.StatusCode, message: str) -> None:
        """The relay's own error reply; whatever the runtime said is dropped."""
        if st.finished or self.closed:
            return
        st.finished = True
        if not st.forwarded:
            self._settle_request(st, 0)
            if not st.reset:
                self.runtime.send(h2.rst_stream(st.sid))
        elif not st.done.done():
            self.runtime.send(h2.rst_stream(st.sid))
        st.held.clear()
        self._drop_runtime_frames(st.sid)
        if st.headers_sent:
            self.client.send(h2.trailers(st.sid, code, message))
        else:
            self.client.send(h2.trailers_only(st.sid, code, message))
        self._end(st.sid)

    def _release(self, st: _Intercepted) -> None:
        self._drop_runtime_frames(st.sid)

    def _flush_finished(self) -> None:
        """Sends the held replies of finished calls once the runtime has completed them."""
        ready = self._ready
        if not ready:
            return
        keep = []
        for st in ready:
            if st.done.done() and not self.closed:
                self.client.send(b"".join(st.held))
                st.held.clear()
                self._end(st.sid)
            elif not self.closed:
                keep.append(st)
        ready[:] = keep

    def _dump_reply(self, st: _Intercepted, code: grpc.StatusCode, details: str, body: bytes | None = None) -> None:
        dumper = st.route.dumper
        if dumper is None:
            return
        latency = time.perf_counter() - st.t0
        if code == grpc.StatusCode.OK:
            dumper.reply(st.route.path, st.call_id, body, latency)
        else:
            dumper.reply(st.route.path, st.call_id, None, latency, code, details)


def _message_body(data: bytes | bytearray) -> bytes | None:
    """The one uncompressed message of a unary call's body, or None."""
    if len(data) < 5 or data[0] != 0:
        return None
    length = int.from_bytes(data[1:5], "big")
    if len(data) != 5 + length:
        return None
    return bytes(data[5:])


# -- the runtime is down ---------------------------------------------------------------------

class _Unreachable:
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
        self.open: set[int] = set()
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

    def from_client(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        if not self.preface:
            if len(buf) < len(h2.PREFACE):
                return
            self.preface = True
            pos = len(h2.PREFACE)
        out = []
        while len(buf) - pos >= 9:
            length = int.from_bytes(buf[pos:pos + 3], "big")
            end = pos + 9 + length
            if end > len(buf):
                break
            ftype, flags = buf[pos + 3], buf[pos + 4]
            sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
            if ftype == h2.SETTINGS and not flags & h2.ACK:
                out.append(h2.frame(h2.SETTINGS, h2.ACK, 0))
            elif ftype == h2.PING and not flags & h2.ACK:
                out.append(h2.frame(h2.PING, h2.ACK, 0, bytes(buf[pos + 9:end])))
            elif ftype == h2.DATA and length:
                out.append(h2.window_update(0, length))
            elif ftype == h2.HEADERS and sid > self.last_stream:
                self.last_stream = sid
                if flags & h2.END_HEADERS:
                    out.append(h2.trailers_only(sid, grpc.StatusCode.UNAVAILABLE,
                                                f"cri-resmgr: the runtime at {self.relay.upstream_path} "
                                                f"is not reachable: {self.why}"))
                else:
                    self.open.add(sid)
            elif ftype == h2.CONTINUATION and flags & h2.END_HEADERS and sid in self.open:
                self.open.discard(sid)
                out.append(h2.trailers_only(sid, grpc.StatusCode.UNAVAILABLE,
                                            f"cri-resmgr: the runtime at {self.relay.upstream_path} "
                                            f"is not reachable: {self.why}"))
            pos = end
        del buf[:pos]
        if out:
            self.transport.write(b"".join(out))
