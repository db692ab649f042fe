"""Intercepted calls on a relayed connection: the request held back and handed to the
interceptor, the rewrite sent on, the reply's final status held until the interceptor is done."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import grpc
from google.protobuf.message import Message

from cri_resmgr.transport.contract import InterceptError, Request
from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.calls import Intercepted, Observed, UpstreamError, message_body
from cri_resmgr.transport.refusals import decode_request

if TYPE_CHECKING:
    from cri_resmgr.transport.framerelay.connection import _Out
    from cri_resmgr.transport.framerelay.relay import FrameRelay


class InterceptedCalls:
    """The part of `Connection` that runs intercepted calls (mixed in; uses its
    windows, writers and stream table)."""

    if TYPE_CHECKING:  # what it uses of Connection, which defines all of these
        relay: FrameRelay
        client: _Out
        runtime: _Out
        closed: bool
        runtime_window: int
        runtime_max_frame: int
        grant_debt: int
        granted: asyncio.Event
        _ready: list[Intercepted | Observed]

        def _end(self, sid: int) -> None: ...
        def _drop_runtime_frames(self, sid: int) -> None: ...

    def _start_interceptor(self, st: Intercepted) -> None:
        if st.route.dumper is not None:
            body = message_body(st.body)
            st.route.dumper.request(st.route.path, st.call_id, body if body is not None else bytes(st.body))
        st.task = asyncio.ensure_future(self._intercept(st))

    async def _intercept(self, st: Intercepted) -> None:
        route = st.route
        body = message_body(st.body)
        try:
            if body is None:
                raise InterceptError(grpc.StatusCode.INTERNAL,
                                     "cri-resmgr: cannot read the request (compressed or malformed gRPC message)")
            message = decode_request(route.request_type, route.method.name, body)
        except InterceptError as e:
            self.relay.failures.refused(route.path, e.message)
            self._dump_reply(st, e.code, e.message)
            self._answer(st, e.code, e.message)
            return
        try:
            request = Request(route.method.name, route.path, message, lambda m: self._forward(st, m))
            result = await route.interceptor(request)
            if st.reply is None or result is not st.reply:
                raise InterceptError(grpc.StatusCode.INTERNAL,
                                     f"cri-resmgr: the {route.method.name} interceptor did not return "
                                     "the runtime's reply")
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
            self._drop_runtime_frames(st.sid)
            raise
        except grpc.aio.AioRpcError as e:  # from a call the interceptor made elsewhere
            self._dump_reply(st, e.code(), e.details() or "")
            self._answer(st, e.code(), e.details() or "")
        except Exception as e:
            self.relay.failures.failed(route.path, e)
            self._dump_reply(st, grpc.StatusCode.INTERNAL, str(e))
            self._answer(st, grpc.StatusCode.INTERNAL, f"cri-resmgr: {e}")
        self._flush_finished()

    async def _forward(self, st: Intercepted, message: Message) -> Message:
        if st.forwarded:
            raise RuntimeError("an intercepted call can be forwarded once")
        st.forwarded = True
        if not st.done.done():  # the runtime may already have answered (e.g. UNIMPLEMENTED)
            await self._send_request(st, h2.grpc_message(message.SerializeToString()))
        await st.done
        if self.closed:
            raise UpstreamError(grpc.StatusCode.UNAVAILABLE, "cri-resmgr: connection to the runtime closed", False)
        # A reset after the runtime's status does not change it: a gRPC server that answers
        # before reading the request (containerd 1.6's UNIMPLEMENTED) resets the stream after.
        if st.reset and st.status is None:
            raise UpstreamError(grpc.StatusCode.CANCELLED, "cri-resmgr: the runtime reset the call")
        code, details = st.status or (grpc.StatusCode.UNKNOWN, "no status from the runtime")
        if code != grpc.StatusCode.OK:
            raise UpstreamError(code, details)
        if st.reply_overflow:
            raise UpstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"cri-resmgr: the runtime's reply could not be held (limit {self.relay.held.limit} "
                                "bytes held by the relay); try again", False)
        body = message_body(st.reply_body)
        if body is None:
            raise UpstreamError(grpc.StatusCode.INTERNAL,
                                "cri-resmgr: cannot read the runtime's reply (compressed or malformed gRPC message)",
                                False)
        st.reply = st.route.reply_type.FromString(body)
        return st.reply

    async def _send_request(self, st: Intercepted, data: bytes) -> None:
        # The client had its window back as the request arrived; the runtime's
        # grants for what it gets now are not the client's to have again.
        self.grant_debt += len(data)
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

    def _pass_reply(self, st: Intercepted) -> None:
        """The runtime's reply goes to the client as it was sent."""
        if st.finished or self.closed:
            return
        st.finished = True
        self._ready.append(st)

    def _answer(self, st: Intercepted, code: grpc.StatusCode, message: str) -> None:
        """The relay's own error reply; whatever the runtime said is dropped."""
        if st.finished or self.closed:
            return
        st.finished = True
        if not st.forwarded:
            if not st.reset:
                self.runtime.send(h2.rst_stream(st.sid))
        elif not st.done.done():
            self.runtime.send(h2.rst_stream(st.sid))
        st.held.clear()
        self._drop_runtime_frames(st.sid)
        self._end(st.sid)
        if st.headers_sent:
            self.client.send(h2.trailers(st.sid, code, message))
        else:
            self.client.send(h2.trailers_only(st.sid, code, message))

    def _flush_finished(self) -> None:
        """Sends the held replies of finished calls once the runtime has completed them."""
        ready = self._ready
        if not ready:
            return
        keep = []
        for st in ready:
            if st.complete() and not self.closed:
                self._end(st.sid)  # first: once the client has its answer, the call holds nothing
                self.client.send(b"".join(st.held))
                st.held.clear()
            elif not self.closed:
                keep.append(st)
        ready[:] = keep

    def _dump_reply(self, st: Intercepted, code: grpc.StatusCode, details: str, body: bytes | None = None) -> None:
        dumper = st.route.dumper
        if dumper is None:
            return
        latency = time.perf_counter() - st.t0
        if code == grpc.StatusCode.OK:
            dumper.reply(st.route.path, st.call_id, body, latency)
        else:
            dumper.reply(st.route.path, st.call_id, None, latency, code, details)
