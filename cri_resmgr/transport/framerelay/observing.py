"""Observed calls on a relayed connection: passed through unread, the reply copied for
its route's scan (crash detection), the final status held only while the scan's
awaitable runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import grpc

from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.calls import Intercepted, Observed, is_one_message

if TYPE_CHECKING:
    from cri_resmgr.transport.framerelay.relay import FrameRelay


class ObservedCalls:
    """The part of `Connection` that runs observed calls (mixed in; uses its stream
    table and the list of held replies)."""

    if TYPE_CHECKING:  # what it uses of Connection, which defines all of these
        relay: FrameRelay
        closed: bool
        _ready: list[Intercepted | Observed]

        def _end(self, sid: int) -> None: ...
        def _flush_finished(self) -> None: ...

    def _observed_data(self, st: Observed, sid: int, flags: int, frame: memoryview) -> None:
        """A reply DATA frame (it goes on unchanged): its payload is copied for the scan."""
        if not st.overflow:
            body = h2.data_payload(flags, bytes(frame[9:])) if flags & h2.PADDED else frame[9:]
            if self.relay.held.take(len(body)):
                st.reserved += len(body)
                st.reply += body
            else:  # not scanned; the runtime's reply goes on as it is
                st.overflow = True
        if flags & h2.END_STREAM:
            self._end(sid)  # no trailers: not a complete gRPC reply, nothing to scan

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
        reply = st.reply
        st.reply = bytearray()
        self.relay.held.give_back(st.reserved)
        st.reserved = 0
        if not is_one_message(reply):
            return None  # compressed or malformed: not read, passed on as it is
        try:
            with memoryview(reply) as view:
                return st.route.scan(view[5:])
        except Exception as e:  # a bug in the scan: kubelet's call goes on regardless
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
