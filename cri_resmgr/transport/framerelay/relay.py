"""The frame relay's server: the socket kubelet connects to, and each connection's two sides.

How frames are relayed: see the package docstring (cri_resmgr/transport/framerelay/__init__.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from typing import Final, TypeAlias

from cri_resmgr.transport import sockets
from cri_resmgr.transport.callstats import CallStats
from cri_resmgr.transport.contract import (
    UNCHANGED,
    DumpSink,
    InterceptionTable,
    Keep,
    ReplyObserver,
    StreamObserver,
    TransportStats,
)
from cri_resmgr.transport.framerelay.calls import (
    INTERCEPT,
    OBSERVE,
    OBSERVE_STREAM,
    REFUSE,
    DumpRoute,
    InterceptRoute,
    ObserveRoute,
    ObserveStreamRoute,
    PassRoute,
    RefuseRoute,
    Route,
)
from cri_resmgr.transport.framerelay.connection import Connection
from cri_resmgr.transport.framerelay.limits import HeldBudget, Limits
from cri_resmgr.transport.framerelay.unreachable import Unreachable
from cri_resmgr.transport.methods import MethodTable, split_path
from cri_resmgr.transport.refusals import FailureLog

log = logging.getLogger(__name__)

# What serves a client connection: relayed, or answered alone while the runtime is down.
Served: TypeAlias = Connection | Unreachable


class FrameRelay:
    """Serves CRI on a unix socket, relaying frames to one runtime socket."""

    def __init__(self, socket_path: str, upstream_path: str, methods: MethodTable,
                 interceptors: InterceptionTable | None = None, dumper: DumpSink | None = None,
                 socket_like: str | None = None, runtime_enabled: bool = True, image_enabled: bool = True,
                 limits: Limits = Limits(), timed: bool = False):
        self.socket_path = sockets.strip_scheme(socket_path)
        self.upstream_path = sockets.strip_scheme(upstream_path)
        self.methods = methods
        self._interceptors: InterceptionTable = interceptors or {}
        self._dumper = dumper
        self._socket_like = socket_like
        self._enabled = {"RuntimeService": runtime_enabled, "ImageService": image_enabled}
        self._routes: dict[bytes, Route] = {}  # known methods only, so bounded
        self._call_ids = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[Served] = set()
        self.limits = limits
        self.held = HeldBudget(limits.held_total)
        self.failures = FailureLog(log)
        self.clients = 0  # client connections open, relayed or not
        self._turned_away_logged = -60.0
        # The runtime as the relay's connections last found it. Each client connection has
        # its own runtime connection, so a restart is seen many times: only the
        # transitions are logged, once each (runtime_lost, runtime_back).
        self.runtime_up = True
        # Per-method latencies and runtime errors, only when metrics are served (`timed`):
        # each route holds its counters, so a call costs two clock reads and a bisect.
        self.calls = CallStats() if timed else None

    # -- the runtime's comings and goings ---------------------------------------------

    def runtime_lost(self, why: str) -> None:
        """A runtime connection failed or was closed by the runtime."""
        if self.runtime_up:
            self.runtime_up = False
            log.warning("runtime at %s lost (%s): callers get UNAVAILABLE until it returns",
                        self.upstream_path, why)
        else:
            log.debug("runtime at %s still away (%s)", self.upstream_path, why)

    def runtime_back(self) -> None:
        """A runtime connection was made: logged only after a loss."""
        if not self.runtime_up:
            self.runtime_up = True
            log.info("runtime at %s is back", self.upstream_path)

    def runtime_probed(self, up: bool, why: str = "") -> None:
        """See contract.Transport.runtime_probed."""
        if up:
            self.runtime_back()
        else:
            self.runtime_lost(why or "does not answer")

    # -- configuration -------------------------------------------------------------

    def reconfigure(self, *, interceptors: InterceptionTable | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None:
        if interceptors is not UNCHANGED:
            self._interceptors = interceptors
        if dumper is not UNCHANGED:
            self._dumper = dumper
        self._routes = {}

    def route(self, raw_path: bytes) -> Route:
        r = self._routes.get(raw_path)
        if r is None:
            r = self._build(raw_path.decode("utf-8", "replace"))
            if r.method is not None:  # a client's made-up paths are not kept
                self._routes[raw_path] = r
        return r

    def _build(self, path: str) -> Route:
        r = self._build_route(path)
        if self.calls is not None and r.kind != REFUSE:
            r.stats = self.calls.method(r.method.name if r.method is not None else None,
                                        r.kind == INTERCEPT or r.kind == OBSERVE or r.kind == OBSERVE_STREAM)
        return r

    def _build_route(self, path: str) -> Route:
        service = split_path(path)[0].rpartition(".")[2]
        if not self._enabled.get(service, True):
            return RefuseRoute(path, f"cri-resmgr: the {service} is disabled on this relay")
        method = self.methods.lookup(path)
        dumper = self._dumper if self._dumper is not None and self._dumper.wants(path) else None
        if method is not None and method.server_streaming and not method.client_streaming:
            observer = self._interceptors.get(method.name)
            if isinstance(observer, StreamObserver):
                return ObserveStreamRoute(path, method, observer.start,
                                          DumpRoute(path, method, dumper) if dumper is not None else None)
        if method is not None and not (method.server_streaming or method.client_streaming):
            interceptor = self._interceptors.get(method.name)
            if isinstance(interceptor, ReplyObserver) and dumper is None:
                return ObserveRoute(path, method, interceptor.scan)
            if interceptor is not None:
                # v1alpha2 is wire-identical to v1: interceptors only ever see v1 types.
                v1 = self.methods.lookup(f"/runtime.v1.{service}/{method.name}") or method
                return InterceptRoute(path, method, dumper, interceptor, v1)
        return DumpRoute(path, method, dumper) if dumper is not None else PassRoute(path, method)

    def stats(self) -> TransportStats:
        return TransportStats(self.runtime_up, self.calls.snapshot() if self.calls is not None else ())

    def call_id(self) -> int:
        return next(self._call_ids)

    def admit(self) -> bool:
        """Counts a new client connection in; False (logged once a minute) beyond the limit."""
        if self.clients >= self.limits.max_connections:
            now = time.monotonic()
            if now - self._turned_away_logged >= 60:
                self._turned_away_logged = now
                log.warning("turning client connections away: %d open, the limit", self.clients)
            return False
        self.clients += 1
        return True

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


class _Connecting:
    """A client connection's stand-in while its runtime side is being connected.
    Reading is paused until then; a loss or back-pressure has nothing to tell yet."""

    __slots__ = ()

    def client_lost(self) -> None:
        pass

    def pause_runtime(self, pause: bool) -> None:
        pass


_CONNECTING: Final = _Connecting()


class _ClientSide(asyncio.Protocol):
    """kubelet's connection to the relay."""

    # Set by connection_made, which asyncio calls first. A stream server's
    # transport is an asyncio.Transport; the stubs type every protocol's BaseTransport.
    transport: asyncio.Transport

    def __init__(self, relay: FrameRelay):
        self.relay = relay
        self.conn: Served | _Connecting = _CONNECTING
        self._connecting: asyncio.Task[None] | None = None
        self.admitted = False
        # What came before the runtime side was connected: reading is paused at once,
        # but uvloop may hand over one read it made before the pause (bounded by it).
        self.early = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # see `transport` above
        self.admitted = self.relay.admit()
        if not self.admitted:
            transport.close()
            return
        self.transport.pause_reading()  # until the runtime side is connected
        self._connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        conn: Served
        try:
            runtime, side = await loop.create_unix_connection(_RuntimeSide, self.relay.upstream_path)
        except OSError as e:
            if self.transport.is_closing():
                return
            self.relay.runtime_lost(f"unreachable: {e}")
            conn = Unreachable(self.relay, self.transport, str(e))
        else:
            self.relay.runtime_back()
            if self.transport.is_closing():
                runtime.close()
                return
            conn = Connection(self.relay, self.transport, runtime, side)
        self.conn = conn
        self.relay.connections.add(conn)
        if self.early:
            early = bytes(self.early)
            self.early.clear()
            conn.from_client(early)
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if isinstance(self.conn, _Connecting):
            self.early += data
        else:
            self.conn.from_client(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.relay.clients -= 1
        self.conn.client_lost()

    def pause_writing(self) -> None:
        self.conn.pause_runtime(True)

    def resume_writing(self) -> None:
        self.conn.pause_runtime(False)


class _RuntimeSide(asyncio.Protocol):
    """The relay's connection to the runtime, paired with one client connection."""

    transport: asyncio.Transport  # set by connection_made, as for _ClientSide

    def __init__(self) -> None:
        self.conn: Connection | None = None
        self.early = bytearray()
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # see _ClientSide.transport

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
