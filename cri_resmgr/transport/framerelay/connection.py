"""One relayed connection: kubelet's frames to the runtime and back, read as they pass."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Protocol

import grpc

from cri_resmgr.transport.callstats import MethodStats
from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.calls import (
    DUMP,
    OBSERVE,
    OBSERVE_STREAM,
    PASS,
    REFUSE,
    Dumped,
    Intercepted,
    Observed,
    ObservedStream,
    StreamState,
)
from cri_resmgr.transport.framerelay.headerblock import BlockError, Reader
from cri_resmgr.transport.framerelay.intercepting import InterceptedCalls
from cri_resmgr.transport.framerelay.observing import ObservedCalls
from cri_resmgr.transport.refusals import too_large

if TYPE_CHECKING:
    from cri_resmgr.transport.framerelay.relay import FrameRelay

log = logging.getLogger(__name__)

_PATH = frozenset({b":path"})
_STATUS = frozenset({b"grpc-status", b"grpc-message"})
_CODE = frozenset({b"grpc-status"})
_clock = time.perf_counter_ns

# A timed stream: when its headers came (ns), and its method's counters.
Timing = tuple[int, MethodStats]
_TOMBSTONES = 1024


class RuntimeSide(Protocol):
    """The runtime connection's asyncio protocol (relay.py): what it read, and whether
    it was lost, before this connection was paired with it."""

    conn: Connection | None
    early: bytearray
    lost: bool


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


def _take(buf: bytearray, data: bytes, start: int, done: int, out: list[bytes | bytearray]) -> bytes:
    """What goes on: `out` plus the unchanged run from `start` to `done`.

    The frames were read from `buf` if it held the start of one (the handled
    frames then leave it), else from `data` itself, whose incomplete last frame
    is kept in `buf`. A read passed on whole is not copied."""
    if buf:
        if start < done:
            out.append(buf[start:done])
        del buf[:done]
    else:
        if done < len(data):
            buf += data[done:]
        if not out:
            return data if start == 0 and done == len(data) else data[start:done]
        if start < done:
            out.append(data[start:done])
    return b"".join(out)


class Connection(InterceptedCalls, ObservedCalls):
    """One kubelet connection and its runtime connection, frame by frame."""

    def __init__(self, relay: FrameRelay, client: asyncio.Transport, runtime_transport: asyncio.Transport,
                 side: RuntimeSide):
        self.relay = relay
        self.client = _Out(client)
        self.runtime_transport = runtime_transport
        self.runtime = _Out(runtime_transport)
        self.cbuf = bytearray()
        self.rbuf = bytearray()
        self.preface = False
        self.limits = relay.limits
        self.creader = Reader(cache_bytes=self.limits.hpack_cache)  # the client's header blocks
        self.rreader = Reader(cache_bytes=self.limits.hpack_cache)  # the runtime's header blocks
        self.cblock: tuple[int, int, bytearray] | None = None  # (stream, flags, fragments) being read
        # (stream, flags, fragments, where its frames are held: None when they go on)
        self.rblock: tuple[int, int, bytearray, list[bytes] | None] | None = None
        # Streams open, with their timing when the relay times calls (None otherwise):
        # the per-stream state every call already has, so timing adds no lookup.
        self.open: dict[int, Timing | None] = {}
        self.streams: dict[int, StreamState] = {}
        self.dropped: dict[int, None] = {}  # streams the relay ended: their frames either way are discarded
        self.last_stream = 0
        self.runtime_window = h2.DEFAULT_WINDOW  # connection window for what goes to the runtime
        self.runtime_initial_window = h2.DEFAULT_WINDOW
        self.runtime_max_frame = h2.DEFAULT_MAX_FRAME  # also the largest frame the client may send
        self.client_max_frame = h2.DEFAULT_MAX_FRAME  # the largest frame the runtime may send
        self.header_limit = self.limits.header_block  # a client header block
        self.grant_debt = 0  # bytes to take off the runtime's next WINDOW_UPDATEs to the client
        self.granted = asyncio.Event()
        self._ready: list[Intercepted | Observed] = []  # answered calls whose replies go out in order
        self.blocked = False  # client frames wait for the runtime's window
        self.paused: set[str] = set()  # why the client's side is not read
        self.closed = False
        self.draining = False
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
            if isinstance(st, Intercepted):
                if not st.done.done():
                    st.done.set_result(None)
                if st.task is not None and not st.finished:
                    st.task.cancel()
        self.granted.set()
        for st in self.streams.values():
            self._release(st)

    def client_lost(self) -> None:
        self.close()

    def runtime_lost(self) -> None:
        if not self.closed:
            # Every connection sees a runtime restart: the relay says it once.
            self.relay.runtime_lost("it closed the connection")
        self.close()

    def pause_runtime(self, pause: bool) -> None:
        if not self.closed:
            (self.runtime_transport.pause_reading if pause else self.runtime_transport.resume_reading)()

    def pause_client(self, pause: bool, why: str = "runtime is not reading") -> None:
        """Reads from the client stop while any reason holds."""
        if self.closed:
            return
        was = bool(self.paused)
        (self.paused.add if pause else self.paused.discard)(why)
        if was != bool(self.paused):
            t = self.client.transport
            (t.pause_reading if self.paused else t.resume_reading)()

    def _fail(self, why: str, code: int | None = None) -> None:
        """Ends the connection; `code`: the client broke the protocol, and is told so with GOAWAY."""
        log.error("closing a client connection: %s", why)
        if code is not None and not self.closed:
            self.client.transport.write(h2.goaway(self.last_stream, code, why.encode()[:256]))
        self.close()

    def _end(self, sid: int) -> None:
        timing = self.open.pop(sid, None)
        if timing is not None:
            timing[1].latency.observe_ns(_clock() - timing[0])
        st = self.streams.pop(sid, None)
        if st is not None:
            self._release(st)

    def _release(self, st: StreamState) -> None:
        if isinstance(st, (Intercepted, Observed)) and st.reserved:
            self.relay.held.give_back(st.reserved)
            st.reserved = 0

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
        if buf or self.blocked or not self.preface:
            buf += data
        if self.blocked:
            return
        src = buf or data  # frames are read from the buffer only if it holds the start of one
        first = 0  # where the frames start
        if not self.preface:
            if len(buf) < len(h2.PREFACE):
                return
            if bytes(buf[:len(h2.PREFACE)]) != h2.PREFACE:
                return self._fail("not an HTTP/2 client (bad connection preface)")
            self.preface = True
            first = len(h2.PREFACE)
        done = first  # end of the frames handled
        start = 0  # start of the run of frames passed through unchanged
        out: list[bytes | bytearray] = []
        credit = 0  # the client's bytes the runtime does not get: the client's window back
        # Frames the relay makes for the runtime while reading (a reset) follow the run read so far.
        self.runtime.midblock = True
        try:
            # The frames as h2.complete_frames reads them, inline: this loop runs for every frame.
            unpack, limit, n, at = h2.HEAD.unpack_from, self.runtime_max_frame, len(src), first
            while n - at >= h2.HEADER_LEN:
                high, low, ftype, flags, sid = unpack(src, at)
                length = high << 8 | low
                if length > limit:
                    raise h2.too_long(length, limit)
                pos, end = at, at + h2.HEADER_LEN + length
                if end > n:
                    break
                at, sid = end, sid & 0x7FFFFFFF
                if self.cblock is not None and (ftype != h2.CONTINUATION or sid != self.cblock[0]):
                    raise h2.PeerError(f"frame of type {ftype} on stream {sid} inside the header block "
                                       f"of stream {self.cblock[0]}")
                if ftype == h2.DATA:
                    st = self.streams.get(sid)
                    if (st is None and sid not in self.dropped) or isinstance(st, (Dumped, Observed)):
                        if length > self.runtime_window:
                            # A rewrite made the client's idea of the window larger
                            # than the runtime's; wait for the runtime's grants.
                            self.blocked = True
                            self.pause_client(True, "runtime window")
                            break
                        self.runtime_window -= length
                        if st is not None:
                            dumped = st.dumped if isinstance(st, ObservedStream) else st
                            if isinstance(dumped, Dumped):
                                dumped.request_data(h2.data_payload(flags, bytes(src[pos + 9:end])))
                    else:
                        if st is not None:
                            self._client_data(st, sid, flags, bytes(src[pos + 9:end]), length)
                        credit += length
                        out.append(src[start:pos])
                        start = end
                elif ftype == h2.HEADERS or ftype == h2.CONTINUATION:
                    extra = self._client_headers(ftype, flags, sid, bytes(src[pos + 9:end]))
                    if extra:
                        out.append(src[start:end])
                        out.append(extra)
                        start = end
                elif ftype == h2.SETTINGS and not flags & h2.ACK:
                    payload = bytes(src[pos + 9:end])
                    self.client_max_frame = h2.settings_params(payload).get(h2.SETTINGS_MAX_FRAME_SIZE,
                                                                            self.client_max_frame)
                    out.append(src[start:pos])
                    out.append(h2.settings_frame(h2.without_header_table(payload)))
                    start = end
                elif ftype == h2.RST_STREAM:
                    st = self.streams.get(sid)
                    if st is None and sid in self.dropped:  # the relay ended the call already
                        out.append(src[start:pos])
                        start = end
                    else:
                        self._client_reset(sid, st)
                done = end
        except h2.PeerError as e:
            return self._fail(f"bad frame from the client: {e}", e.code)
        except BlockError as e:
            return self._fail(f"bad header block from the client: {e}", h2.COMPRESSION_ERROR)
        except (ValueError, IndexError) as e:
            return self._fail(f"bad frame from the client: {e}", h2.PROTOCOL_ERROR)
        if credit:
            self.client.send(h2.window_update(0, credit))
        data = _take(buf, data, start, done, out)
        if not self.closed:
            self.runtime.relay(data, self.cblock is not None)

    def _client_headers(self, ftype: int, flags: int, sid: int, payload: bytes) -> bytes:
        """Reads a client header block; returns frames to send the runtime right after it."""
        fragment = h2.block_fragment(ftype, flags, payload)
        if ftype == h2.HEADERS and flags & h2.END_HEADERS:  # a whole block in one frame: most are
            if len(fragment) > self.header_limit:
                raise h2.PeerError(f"header block of stream {sid} exceeds {self.header_limit} bytes",
                                   h2.ENHANCE_YOUR_CALM)
            first_flags, block = flags, fragment
        else:
            if ftype == h2.HEADERS:
                self.cblock = (sid, flags, bytearray(fragment))
            elif self.cblock is None:
                raise ValueError("CONTINUATION without HEADERS")
            else:
                self.cblock[2].extend(fragment)
            if len(self.cblock[2]) > self.header_limit:
                # Held to read :path; a CONTINUATION flood must not grow it without end.
                raise h2.PeerError(f"header block of stream {sid} exceeds {self.header_limit} bytes",
                                   h2.ENHANCE_YOUR_CALM)
            if not flags & h2.END_HEADERS:
                return b""
            sid, first_flags, held = self.cblock
            self.cblock = None
            block = bytes(held)
        fields = self.creader.read(block, _PATH)
        if sid in self.open or sid in self.streams:
            return b""  # the client's trailers
        if sid <= self.last_stream:
            return b""
        self.last_stream = sid
        path = fields.get(b":path")
        route = self.relay.route(path) if path is not None else None
        stats = route.stats if route is not None else None
        self.open[sid] = (_clock(), stats) if stats is not None else None
        if route is None or route.kind == PASS:
            return b""
        if route.kind == OBSERVE:
            self.streams[sid] = Observed(route, sid)
            return b""
        if route.kind == OBSERVE_STREAM:
            dumped = Dumped(route.dump, self.relay.call_id(), self.limits.max_message) if route.dump else None
            self.streams[sid] = ObservedStream(route, sid, route.start(), dumped)
            return b""
        if route.kind == DUMP:
            self.streams[sid] = Dumped(route, self.relay.call_id(), self.limits.max_message)
            return b""
        if route.kind == REFUSE:
            self._end(sid)
            self._drop_runtime_frames(sid)
            self.client.send(h2.trailers_only(sid, grpc.StatusCode.UNIMPLEMENTED, route.refusal))
            return h2.rst_stream(sid)
        st = Intercepted(route, sid, self.relay.call_id(), self.runtime_initial_window)
        self.streams[sid] = st
        if first_flags & h2.END_STREAM:
            st.ended = True
            self._start_interceptor(st)
        return b""

    def _client_data(self, st: Intercepted, sid: int, flags: int, payload: bytes, length: int) -> None:
        """An intercepted request's DATA: held, not passed on (the caller gives the connection credit)."""
        if st.ended:
            return  # after END_STREAM: dropped
        if length > st.room:
            self._refuse_request(st, None, "", h2.FLOW_CONTROL_ERROR)
            log.warning("%s: the client sent past its stream window; stream reset (FLOW_CONTROL_ERROR)",
                        st.route.path)
            return
        st.room -= length
        st.body += h2.data_payload(flags, payload)
        if not self._hold(st):
            return
        if flags & h2.END_STREAM:
            st.ended = True
            self._start_interceptor(st)

    def _hold(self, st: Intercepted) -> bool:
        """Checks an intercepted request as it arrives, and gives the client the stream
        window to send the rest of it: the body is held whole, so no credit would come
        from the runtime. False if the call was refused."""
        body = st.body
        if len(body) < 5:
            need = 5 - len(body)
        else:
            size = 5 + int.from_bytes(body[1:5], "big")
            if not st.reserved:
                limit = self.limits.max_message
                if size - 5 > limit:
                    self._refuse_request(st, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                         too_large(size - 5, limit))
                    return False
                if not self.relay.held.take(size):
                    self._refuse_request(st, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                         f"cri-resmgr: too many large requests in flight (limit "
                                         f"{self.relay.held.limit} bytes held); try again")
                    return False
                st.reserved = size
            if len(body) > size:
                self._refuse_request(st, grpc.StatusCode.INTERNAL,
                                     f"cri-resmgr: the {st.route.method.name} request holds more than one message")
                return False
            need = size - len(body)
        if need > st.room:
            self.client.send(h2.window_update(st.sid, need - st.room))
            st.room = need
        return True

    def _refuse_request(self, st: Intercepted, code: grpc.StatusCode | None, message: str,
                        reset: int = h2.NO_ERROR) -> None:
        """Ends an intercepted call before its request is complete. `code`: the client's
        status; then RST_STREAM `reset` asks it to stop sending (NO_ERROR, as gRPC does),
        or alone is the stream error."""
        st.finished = True
        self._drop_runtime_frames(st.sid)
        self._end(st.sid)
        if code is not None:
            self.relay.failures.refused(st.route.path, message)
            self.client.send(h2.trailers_only(st.sid, code, message))
        self.client.send(h2.rst_stream(st.sid, reset))
        self.runtime.send(h2.rst_stream(st.sid))

    def _client_reset(self, sid: int, st: StreamState | None) -> None:
        """The client gave up on a call: the runtime is told (the frame goes on)."""
        if isinstance(st, Intercepted):
            st.finished = True
            if st.task is not None:
                st.task.cancel()
            self._drop_runtime_frames(sid)
        elif isinstance(st, Dumped):
            st.finish(grpc.StatusCode.CANCELLED, "cancelled by the client")
        elif isinstance(st, ObservedStream) and st.dumped is not None and st not in self._ready:
            st.dumped.finish(grpc.StatusCode.CANCELLED, "cancelled by the client")
        self._end(sid)  # an observed call's held status still goes out, in order (HPACK)

    # -- runtime -> client --------------------------------------------------------------

    def from_runtime(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.rbuf
        if buf:  # the start of a frame came in the last read
            buf += data
        src = buf or data
        done = start = 0
        out: list[bytes | bytearray] = []
        try:
            unpack, limit, n, at = h2.HEAD.unpack_from, self.client_max_frame, len(src), 0
            while n - at >= h2.HEADER_LEN:  # as in from_client
                high, low, ftype, flags, sid = unpack(src, at)
                length = high << 8 | low
                if length > limit:
                    raise h2.too_long(length, limit)
                pos, end = at, at + h2.HEADER_LEN + length
                if end > n:
                    break
                at, sid = end, sid & 0x7FFFFFFF
                done = end
                keep = True
                if ftype == h2.DATA:
                    st = self.streams.get(sid)
                    if isinstance(st, Observed):
                        with memoryview(src) as view:
                            self._observed_data(st, sid, flags, view[pos:end])
                    elif st is not None or sid in self.dropped:
                        keep = self._runtime_data(st, sid, flags, bytes(src[pos:end]), length)
                    elif flags & h2.END_STREAM:
                        self._end(sid)
                elif ftype == h2.HEADERS and flags & h2.END_HEADERS and self.rblock is None \
                        and sid not in self.streams and sid not in self.dropped:
                    self._passed_headers(flags, sid, h2.block_fragment(ftype, flags, bytes(src[pos + 9:end])))
                elif ftype == h2.HEADERS or ftype == h2.CONTINUATION:
                    keep = self._runtime_headers(ftype, flags, sid, bytes(src[pos:end]))
                elif ftype == h2.WINDOW_UPDATE:
                    increment = int.from_bytes(src[pos + 9:pos + 13], "big") & 0x7FFFFFFF
                    if sid == 0:
                        self.runtime_window += increment
                        self.granted.set()
                        if self.grant_debt:  # the client's share is smaller by what the relay added
                            out.append(src[start:pos])
                            start = end
                            granted = increment - self.grant_debt
                            self.grant_debt = max(0, -granted)
                            if granted > 0:
                                out.append(h2.window_update(0, granted))
                    else:
                        st = self.streams.get(sid)
                        if isinstance(st, Intercepted):  # the client's window is the relay's to give
                            st.window += increment
                            self.granted.set()
                        keep = st is None and sid not in self.dropped or isinstance(st, (Dumped, Observed))
                elif ftype == h2.RST_STREAM:
                    st = self.streams.get(sid)
                    if st is not None or sid in self.dropped:
                        keep = self._runtime_reset(st, sid, bytes(src[pos:end]))
                    else:
                        self._end(sid)
                elif ftype == h2.SETTINGS and not flags & h2.ACK:
                    self._runtime_settings(bytes(src[pos + 9:end]))
                    out.append(src[start:pos])
                    out.append(h2.settings_frame(h2.without_header_table(bytes(src[pos + 9:end]))))
                    start = end
                    continue
                if not keep:
                    out.append(src[start:pos])
                    start = end
        except (BlockError, ValueError, IndexError) as e:  # PeerError included: the runtime broke it
            return self._fail(f"bad frame from the runtime: {e}")
        data = _take(buf, data, start, done, out)
        if data and not self.closed:
            self.client.relay(data, self.rblock is not None and self.rblock[3] is None)
        self._flush_finished()
        if self.blocked and self.runtime_window > 0:
            self.blocked = False
            self.pause_client(False, "runtime window")
            self.from_client(b"")

    def _passed_headers(self, flags: int, sid: int, block: bytes) -> None:
        """The headers or trailers of a call the relay passes through, in one frame:
        read only to follow the table, and for a timed call's status."""
        if flags & h2.END_STREAM:
            timing = self.open.get(sid)
            if timing is not None:
                code = h2.status_code(self.rreader.read(block, _CODE).get(b"grpc-status"))
                if code != grpc.StatusCode.OK:
                    timing[1].error(code)
            else:
                self.rreader.read(block)
            self._end(sid)
        else:
            self.rreader.read(block)

    def _runtime_headers(self, ftype: int, flags: int, sid: int, frame: bytes) -> bool:
        fragment = h2.block_fragment(ftype, flags, frame[9:])
        if ftype == h2.HEADERS:
            st = self.streams.get(sid)
            if isinstance(st, Intercepted) and not st.finished:
                holder = st.held if flags & h2.END_STREAM else None
                st.headers_sent = st.headers_sent or holder is None
            elif isinstance(st, Observed):  # trailers in several frames wait for the scan (rare)
                holder = st.held if flags & h2.END_STREAM and not flags & h2.END_HEADERS else None
            elif isinstance(st, Intercepted) or sid in self.dropped:
                holder = []
            else:
                holder = None
            self.rblock = (sid, flags, bytearray(fragment), holder)
        elif self.rblock is None:
            raise ValueError("CONTINUATION without HEADERS")
        else:
            self.rblock[2].extend(fragment)
            if len(self.rblock[2]) > self.limits.runtime_header_block:
                raise ValueError(f"header block exceeds {self.limits.runtime_header_block} bytes")
        sid, first_flags, block, holder = self.rblock
        if holder is not None:
            holder.append(frame)
        if not flags & h2.END_HEADERS:
            return holder is None
        self.rblock = None
        st = self.streams.get(sid)
        timing = self.open.get(sid) if first_flags & h2.END_STREAM else None
        if first_flags & h2.END_STREAM and st is not None:
            wanted = _STATUS
        else:  # a timed call's status, for the runtime's errors by code
            wanted = _CODE if timing is not None else frozenset()
        fields = self.rreader.read(bytes(block), wanted)
        if holder is not None and not self.rreader.table_empty:
            self._fail("the runtime's header compression ignores SETTINGS_HEADER_TABLE_SIZE=0; "
                       "cannot hold back its replies")
            return False
        status = None
        if first_flags & h2.END_STREAM:
            status = (h2.status_code(fields.get(b"grpc-status")), h2.status_message(fields.get(b"grpc-message")))
            if timing is not None and status[0] != grpc.StatusCode.OK:
                timing[1].error(status[0])
        if isinstance(st, Observed):
            if status is None:
                return True  # the reply's headers
            if isinstance(st, ObservedStream) and st.dumped is not None:
                st.dumped.finish(*status)
            return self._observed_status(st, status[0], frame if holder is None else None)
        if isinstance(st, Intercepted) and not st.finished:
            if status is not None:
                st.status = status
                if not st.done.done():
                    st.done.set_result(None)
            return holder is None
        if holder is not None:  # dropped
            return False
        if status is not None:
            if isinstance(st, Dumped):
                st.finish(*status)
            self._end(sid)
        return True

    def _runtime_data(self, st: StreamState | None, sid: int, flags: int, frame: bytes, length: int) -> bool:
        if isinstance(st, Dumped):
            st.reply_data(h2.data_payload(flags, frame[9:]))
            if flags & h2.END_STREAM:
                st.finish(grpc.StatusCode.OK, "")
                self._end(sid)
            return True
        if isinstance(st, Intercepted) and not st.finished:
            if not st.reply_overflow:
                payload = h2.data_payload(flags, frame[9:])
                if self.relay.held.take(len(payload)):
                    st.reserved += len(payload)
                    st.reply_body += payload
                else:  # the interceptor gets RESOURCE_EXHAUSTED; the client's frames go on
                    st.reply_overflow = True
            if flags & h2.END_STREAM and not st.done.done():
                st.done.set_result(None)  # no trailers: the client sees the end as it is
            return True
        if length:  # dropped: the runtime gets its window back
            self.runtime.send(h2.window_update(0, length))
        return False

    def _runtime_reset(self, st: StreamState | None, sid: int, frame: bytes) -> bool:
        if isinstance(st, Observed):
            if st in self._ready:  # after the held status, in order
                st.held.append(frame)
                return False
            if isinstance(st, ObservedStream) and st.dumped is not None:
                st.dumped.finish(grpc.StatusCode.CANCELLED, "stream reset by the runtime")
            self._end(sid)  # a streamed reply cut short is never completed
            return True
        if isinstance(st, Dumped):
            st.finish(grpc.StatusCode.CANCELLED, "stream reset by the runtime")
            self._end(sid)
            return True
        if isinstance(st, Intercepted) and not st.finished:
            st.held.append(frame)
            st.reset = True
            if not st.done.done():
                st.done.set_result(None)
            return False
        return False

    def _runtime_settings(self, payload: bytes) -> None:
        params = h2.settings_params(payload)
        if h2.SETTINGS_INITIAL_WINDOW_SIZE in params:
            delta = params[h2.SETTINGS_INITIAL_WINDOW_SIZE] - self.runtime_initial_window
            self.runtime_initial_window += delta
            for st in self.streams.values():
                if isinstance(st, Intercepted):
                    st.window += delta
                    st.room += delta
            self.granted.set()
        if h2.SETTINGS_MAX_FRAME_SIZE in params:
            self.runtime_max_frame = params[h2.SETTINGS_MAX_FRAME_SIZE]
        if h2.SETTINGS_MAX_HEADER_LIST_SIZE in params:
            self.header_limit = min(params[h2.SETTINGS_MAX_HEADER_LIST_SIZE], self.limits.header_block_ceiling)
