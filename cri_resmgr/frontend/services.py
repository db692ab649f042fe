"""The services both front ends run around the engine, wired once.

A front end enters each on one `contextlib.AsyncExitStack` as it starts it; whatever way
`run` returns (stopped, or refused at any step of its start), the stack undoes what was done,
in reverse: background tasks cancelled and awaited, the Config service stopped, the engine
closed, the HTTP endpoint closed, the state directory's lock released. A step that cannot
be done raises `StartFailed`, whose text the front end logs as its one error line.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from typing import Any
from wsgiref.simple_server import WSGIServer

from cri_resmgr import supervise
from cri_resmgr.config import Settings
from cri_resmgr.config.service import ConfigServer
from cri_resmgr.config.settings import DISABLED
from cri_resmgr.dump import Dumper
from cri_resmgr.engine.controller import AgentConfig, Controller, Feed
from cri_resmgr.engine.runtime import RuntimePort
from cri_resmgr.frontend import health, metrics, nodeexport, reconcile, statelock
from cri_resmgr.frontend.agent_client import AgentClient
from cri_resmgr.policy.registry import Registry
from cri_resmgr.status import endpoint
from cri_resmgr.transport import sockets
from cri_resmgr.transport.methods import MethodTable


class StartFailed(Exception):
    """A start step that cannot be done: one line for the log; the process exits 1."""


class Services:
    """The shared wiring of one run of a front end, on its exit stack."""

    def __init__(self, stack: contextlib.AsyncExitStack, settings: Settings) -> None:
        self._stack = stack
        self._settings = settings
        self._loop = asyncio.get_running_loop()

    def lock_state(self, holder: str) -> None:
        """One front end per state directory (`statelock.py`), released at the end."""
        try:
            lock = statelock.acquire(self._settings.state_dir, holder)
        except statelock.StateDirError as e:
            raise StartFailed(str(e)) from None
        self._stack.callback(lock.release)

    def listen_http(self) -> WSGIServer | None:
        """-metrics-address, bound now, before the runtime is met: taken by another process, it
        would answer `-probe` and `cri-resmgr status` in this one's name, so the start is refused.
        /readyz says "starting" until `serve_http`."""
        address = self._settings.metrics_address
        if not address:
            return None
        try:
            http = health.listen(address)
        except OSError as e:
            raise StartFailed(f"cannot serve metrics on {address}: {e.strerror or e}; refusing to start without "
                              "/readyz and /state (give a free -metrics-address, or none)") from None
        self._stack.push_async_callback(_close_http, http)
        return http

    def stop_event(self) -> asyncio.Event:
        """Set by SIGTERM and SIGINT."""
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._on_signal(sig, stop.set)
        return stop

    def _on_signal(self, sig: signal.Signals, callback: Callable[..., None], *args: Any) -> None:
        """`callback(*args)` on `sig` until the end, then the handler before it again: a SIGHUP
        once the engine is closed reloads nothing, a SIGINT is the loop runner's again."""
        previous = signal.getsignal(sig)
        self._loop.add_signal_handler(sig, callback, *args)
        self._stack.callback(_restore_signal, self._loop, sig, previous)

    def engine(self, registry: Registry, feed: Feed, runtime: RuntimePort, methods: MethodTable,
               set_debug: Callable[[bool], None] | None) -> Controller:
        """The engine's controller, with a dumper factory that decodes `methods`; closed at the end."""
        max_size = self._settings.dump_max_size

        def make_dumper(specs: list[str], file: str | None, fmt: str, redact: bool) -> Dumper:
            return Dumper(specs, file=file, fmt=fmt, redact=redact, methods=methods, max_size=max_size)

        controller = Controller(self._settings.engine(), registry, feed, runtime, make_dumper, set_debug)
        self._stack.push_async_callback(controller.close)
        return controller

    def reload_on_sighup(self, controller: Controller) -> None:
        """SIGHUP: re-read -force-config and reopen the dump file (logrotate's postrotate)."""
        self._on_signal(signal.SIGHUP, _on_sighup, controller)

    async def serve_config(self, controller: Controller) -> None:
        """The Config service the node agent pushes to (unless -config-socket is '-'); raises
        what its bind raises, for the front end to word."""
        if self._settings.config_socket == DISABLED:
            return
        server = ConfigServer(AgentConfig(controller), sockets.strip_scheme(self._settings.config_socket))
        await server.start()
        self._stack.push_async_callback(server.stop)

    def serve_http(self, http: WSGIServer | None, controller: Controller,
                   transport: metrics.TransportSource | None) -> None:
        """The real endpoint on the listening server: metrics, /readyz and /state of `controller`."""
        if http is not None:
            health.attach(http, metrics.registry(controller, transport), health.on_loop(controller, self._loop),
                          endpoint.on_loop(controller, self._loop))

    def supervise(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """`run` as a supervised task (supervise.py), cancelled and awaited at the end."""
        self._stack.push_async_callback(_cancel, supervise.start(name, run))

    def reconcile(self, controller: Controller, words: reconcile.Wording) -> None:
        """The periodic reconcile (-reconcile-period; 0: none; `reconcile.py`), in the front end's words."""
        period = self._settings.reconcile_period
        if period > 0:
            self.supervise("reconcile", lambda: reconcile.every(controller, period, words))

    def export_node(self, controller: Controller) -> None:
        """The node's CPUs published on its Node through the agent (-agent-socket,
        -agent-export-interval; '-' or 0: not published)."""
        s = self._settings
        if s.agent_socket != DISABLED and s.agent_export_interval > 0:
            client = AgentClient(sockets.strip_scheme(s.agent_socket))
            export = nodeexport.NodeExport(client, lambda: controller.policy_name, controller.usage,
                                           s.agent_export_interval)
            # Closed whether or not the task got to run, and after it ended (the stack undoes in reverse).
            self._stack.push_async_callback(client.close)
            self.supervise("node export", export.run)

    def cancel_at_end(self, task: asyncio.Future[Any]) -> None:
        """`task` cancelled, and awaited, at the end."""
        self._stack.push_async_callback(_cancel, task)

    def at_end(self, undo: Callable[[], Any]) -> None:
        """`undo()` at the end, in its turn (the reverse of the start)."""
        self._stack.callback(undo)

    def at_end_async(self, undo: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """`await undo()` at the end, in its turn."""
        self._stack.push_async_callback(undo)


def _restore_signal(loop: asyncio.AbstractEventLoop, sig: signal.Signals, previous: Any) -> None:
    loop.remove_signal_handler(sig)
    if previous is not None:  # None: not set from Python; the default stays
        signal.signal(sig, previous)


def _on_sighup(controller: Controller) -> None:
    controller.reopen_dump()
    supervise.watched(asyncio.ensure_future(controller.reload_forced()), "SIGHUP reload")


async def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _close_http(http: WSGIServer) -> None:
    await asyncio.to_thread(http.shutdown)
    http.server_close()
