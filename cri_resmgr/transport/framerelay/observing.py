"""Observed calls on a relayed connection: passed through unread, the reply copied for
its route's scan (crash detection), the final status held only while the scan's
awaitable runs.

A streamed reply (StreamContainers) is read message by message as its frames pass:
only the message being received is held, each whole one is handed to the call's
reading at once, and the reading is completed only by an OK status after whole
messages. Its frames are never held back; the final status waits as a unary
observed call's does."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import grpc

from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.calls import (
    Intercepted,
    Observed,
    ObservedStream,
    ObserveStreamRoute,
    is_one_message,
)

# A gRPC message's prefix: the compressed flag, the length.
_PREFIX = struct.Struct(">BI")

if TYPE_CHECKING:
    from cri_resmgr.transport.framerelay.limits import Limits
    from cri_resmgr.transport.framerelay.relay import FrameRelay


class ObservedCalls:
    """The part of `Connection` that runs observed calls (mixed in; uses its stream
    table and the list of held replies)."""

    if TYPE_CHECKING:  # what it uses of Connection, which defines all of these
        relay: FrameRelay
        limits: Limits
        closed: bool
        _ready: list[Intercepted | Observed]

        def _end(self, sid: int) -> None: ...
        def _flush_finished(self) -> None: ...

    def _observed_data(self, st: Observed, sid: int, flags: int, frame: memoryview) -> None:
        """A reply DATA frame (it goes on unchanged): its payload is copied for the scan."""
        if not st.overflow:
            body = h2.data_payload(flags, bytes(frame[9:])) if flags & h2.PADDED else frame[9:]
            if isinstance(st, ObservedStream):
                self._stream_body(st, body)
            elif self.relay.held.take(len(body)):
                st.reserved += len(body)
                st.reply += body
            else:  # not scanned; the runtime's reply goes on as it is
                st.overflow = True
        if isinstance(st, ObservedStream) and st.dumped is not None:
            st.dumped.reply_data(h2.data_payload(flags, bytes(frame[9:])))
            if flags & h2.END_STREAM:
                st.dumped.finish(grpc.StatusCode.OK, "")
        if flags & h2.END_STREAM:
            self._end(sid)  # no trailers: not a complete gRPC reply, nothing to scan

    def _stream_body(self, st: ObservedStream, body: bytes | memoryview) -> None:
        """A streamed reply's DATA payload: each message it completes goes to the reading;
        what is left of a message not yet complete is kept (within the held budget)."""
        if st.reply:
            if not self.relay.held.take(len(body)):
                return self._unreadable(st)
            st.reserved += len(body)
            st.reply += body
            data: bytes | bytearray | memoryview = st.reply
        else:  # whole messages are read where they lie, uncopied
            data = body
        limit = self.limits.max_message
        pos, n, bad = 0, len(data), False
        with memoryview(data) as view:
            while n - pos >= 5:
                compressed, size = _PREFIX.unpack_from(view, pos)
                if compressed or size > limit:  # compressed (kubelet asks for none), or too large
                    bad = True
                    break
                end = pos + 5 + size
                if end > n:
                    break
                try:
                    with view[pos + 5:end] as message:
                        st.reading.message(message)
                except Exception as e:  # a bug in the reading: kubelet's call goes on regardless
                    self.relay.failures.failed(st.route.path, e)
                    bad = True
                    break
                pos = end
        if bad:
            return self._unreadable(st)
        if data is st.reply:
            del st.reply[:pos]
            self.relay.held.give_back(pos)
            st.reserved -= pos
        elif pos < n:
            if not self.relay.held.take(n - pos):
                return self._unreadable(st)
            st.reserved += n - pos
            st.reply += data[pos:]

    def _unreadable(self, st: ObservedStream) -> None:
        """The stream can no longer be read whole: it goes on as it is, never completed."""
        st.overflow = True
        st.reply = bytearray()
        self.relay.held.give_back(st.reserved)
        st.reserved = 0

    def _observed_status(self, st: Observed, code: grpc.StatusCode, frame: bytes | None) -> bool:
        """The reply's final status came: scans the reply. True if the status goes on at
        once (in the run being read); False if its frames wait: `frame` (the trailers,
        whole in one frame) or those held already, until the scan's awaitable is done."""
        pending = self._scan(st) if code == grpc.StatusCode.OK and not st.overflow else None
        if pending is None and not st.held:
            self._end(st.sid)
            return True
        if frame is not None:
            st.held.append(frame)
        self._ready.append(st)
        if pending is None:
            st.settled = True  # a block of several frames: sent once the run read so far is
        else:
            st.task = asyncio.ensure_future(self._settle(st, pending))
        return False

    def _scan(self, st: Observed) -> Awaitable[None] | None:
        if isinstance(st, ObservedStream):
            return self._complete(st)
        route = st.route
        assert not isinstance(route, ObserveStreamRoute)  # only an ObservedStream has one
        reply = st.reply
        st.reply = bytearray()
        self.relay.held.give_back(st.reserved)
        st.reserved = 0
        if not is_one_message(reply):
            return None  # compressed or malformed: not read, passed on as it is
        try:
            with memoryview(reply) as view:
                return route.scan(view[5:])
        except Exception as e:  # a bug in the scan: kubelet's call goes on regardless
            self.relay.failures.failed(route.path, e)
            return None

    def _complete(self, st: ObservedStream) -> Awaitable[None] | None:
        """An OK status ended a streamed reply: complete unless part of a message is left."""
        if st.reply:  # the stream stopped inside a message: not a whole reply
            self._unreadable(st)
            return None
        try:
            return st.reading.complete()
        except Exception as e:  # a bug in the reading: kubelet's call goes on regardless
            self.relay.failures.failed(st.route.path, e)
            return None

    async def _settle(self, st: Observed, pending: Awaitable[None]) -> None:
        try:
            await pending
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the observer's work failed; kubelet's call does not
            self.relay.failures.failed(st.route.path, e)
        st.settled = True
        self._flush_finished()
