"""The plugin's connection to the runtime: connect, register, serve, and again.

One session: connect to the NRI socket (or take the socket a runtime that launched
the plugin handed over, `NRI_PLUGIN_SOCKET`), multiplex it (`mux.py`), serve the
Plugin service on connection 1 and call the Runtime service on connection 2
(`ttrpc.py`), register (name and two-digit index) within the registration timeout,
then answer the runtime's calls until the connection closes. A lost connection is
dialled again with back-off; the runtime then configures and synchronizes the
plugin afresh. A handed-over socket cannot be dialled again: the plugin exits and
the runtime starts it anew.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.hooks import Hooks
from cri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.transport.callstats import CallStats
from cri_resmgr.transport.contract import TransportStats

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
REGISTRATION_TIMEOUT = 5.0  # NRI's default; registering takes one round trip
UPDATE_TIMEOUT = 2.0
# The NRI version the plugin tells the runtime at registration (NRI v0.12 exchanges versions
# there, containerd/nri#271; older runtimes ignore the field): that of the api.proto subset it
# speaks (protos/nri/nri_api.proto).
NRI_VERSION = "v0.10.0"

A = TypeVar("A", bound=Message)


@dataclass(frozen=True)
class Identity:
    name: str  # the plugin's name
    index: str  # two digits: the runtime calls plugins in ascending order

    def __str__(self) -> str:
        return f"{self.index}-{self.name}"


def check_name(name: str) -> str:
    """NRI's rule for a plugin name: not empty, only [a-zA-Z0-9_.+-] (a runtime refuses
    the registration otherwise); raises ValueError naming the value."""
    if not name:
        raise ValueError("plugin name is empty")
    bad = sorted({ch for ch in name if not (ch.isascii() and (ch.isalnum() or ch in "_.+-"))})
    if bad:
        raise ValueError(f"plugin name {name!r}: {''.join(bad)!r} not allowed (letters, digits, _ . + - only)")
    return name


def check_index(index: str) -> str:
    """NRI wants exactly two digits; raises ValueError naming the value."""
    if len(index) != 2 or not index.isdigit():
        raise ValueError(f"plugin index {index!r}: expected two digits, e.g. 90")
    return index


class Plugin:
    """The connection loop. `stats()` is a transport's: the runtime's connection state
    and each hook's latency and failures, for metrics."""

    def __init__(self, identity: Identity, hooks: Hooks, runtime: NriRuntime, *, socket_path: str,
                 handed_fd: int | None = None, backoff: tuple[float, float] = (0.5, 30.0)):
        self._id = identity
        self._hooks = hooks
        self._runtime = runtime
        self._socket_path = socket_path
        self._fd = handed_fd
        self._backoff = backoff
        self._calls = CallStats()
        self.sessions = 0  # registered connections so far
        self.connected = asyncio.Event()  # set while registered

    def stats(self) -> TransportStats:
        return TransportStats(runtime_up=self._runtime.up, calls=self._calls.snapshot())

    async def run(self, stop: asyncio.Event) -> int:
        """Until `stop` is set (0), or a handed-over socket closes (0) or cannot be used (1)."""
        delay, failing = self._backoff[0], False
        while not stop.is_set():
            try:
                reader, writer = await self._connect()
            except OSError as e:
                if self._fd is not None:
                    log.error("cannot use the socket the runtime handed over (fd %d): %s", self._fd, e)
                    return 1
                if not failing:
                    log.warning("cannot connect to NRI at %s: %s (retrying with back-off up to %gs)",
                                self._socket_path, e, self._backoff[1])
                failing = True
                if await _sleep_or_stop(delay, stop):
                    break
                delay = min(delay * 2, self._backoff[1])
                continue
            failing = False
            if await self._session(reader, writer, stop):
                delay = self._backoff[0]
            if self._fd is not None:
                log.info("the runtime closed the connection it handed over: exiting")
                return 0
            if not stop.is_set():
                log.info("reconnecting to NRI at %s in %gs", self._socket_path, delay)
                if await _sleep_or_stop(delay, stop):
                    break
                delay = min(delay * 2, self._backoff[1])
        return 0

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._fd is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=self._fd)
            return await asyncio.open_connection(sock=sock)
        return await asyncio.open_unix_connection(self._socket_path)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       stop: asyncio.Event) -> bool:
        """One connection; True if the plugin registered on it."""
        mux = Mux(reader, writer)
        # No UpdateContainers while the runtime waits for a reply of ours (nri/delivery.py).
        server = ttrpc.Server(mux.open(PLUGIN_SERVICE_CONN), self._handlers(), default_timeout=10.0,
                              name="NRI plugin service", in_flight=self._runtime.delivery.watcher())
        client = ttrpc.Client(mux.open(RUNTIME_SERVICE_CONN), name="NRI runtime service")
        tasks = [asyncio.create_task(mux.run()), asyncio.create_task(server.serve()),
                 asyncio.create_task(client.receive())]
        registered = False
        try:
            req = api.RegisterPluginRequest(plugin_name=self._id.name, plugin_idx=self._id.index,
                                            NRI_version=NRI_VERSION)
            t0 = time.monotonic()
            await client.call(RUNTIME_SERVICE, "RegisterPlugin", req.SerializeToString(), REGISTRATION_TIMEOUT)
            registered = True
            self.sessions += 1
            log.info("registered with the runtime as NRI plugin %s (%.0f ms)", self._id,
                     (time.monotonic() - t0) * 1000)

            updated = self._calls.method("UpdateContainers", intercepted=False)

            async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
                # The request is written before the first await (Delivery relies on it).
                t0 = time.perf_counter_ns()
                try:
                    data = await client.call(RUNTIME_SERVICE, "UpdateContainers",
                                             api.UpdateContainersRequest(update=updates).SerializeToString(),
                                             UPDATE_TIMEOUT)
                except ttrpc.TtrpcError as e:
                    updated.error(_status_code(e.code))
                    raise
                finally:
                    ns = time.perf_counter_ns() - t0
                    updated.latency.observe_ns(ns)
                    if ns / 1e9 > self._hooks.request_timeout:
                        log.warning("UpdateContainers of %d containers took %.2fs, more than the runtime's "
                                    "request timeout (%gs)", len(updates), ns / 1e9, self._hooks.request_timeout)
                return list(api.UpdateContainersResponse.FromString(data).failed)

            self._runtime.connected(send, self._runtime.runtime_name, self._runtime.runtime_version)
            self.connected.set()
            closed = asyncio.ensure_future(tasks[0])
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if mux.closed:
                log.warning("lost the NRI connection%s", f": {mux.error}" if mux.error else "")
        except ttrpc.TtrpcError as e:
            log.error("registering as NRI plugin %s failed: %s", self._id, e)
        finally:
            self.connected.clear()
            self._runtime.disconnected()
            mux.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return registered

    # -- the Plugin service ----------------------------------------------------------------

    def _handlers(self) -> dict[tuple[str, str], ttrpc.Handler]:
        h = self._hooks
        table: Mapping[str, tuple[type[Message], Callable[[Message], Awaitable[Message]]]] = {
            "Configure": (api.ConfigureRequest, h.configure),  # type: ignore[dict-item]
            "Synchronize": (api.SynchronizeRequest, h.synchronize),  # type: ignore[dict-item]
            "Shutdown": (api.Empty, h.shutdown_requested),  # type: ignore[dict-item]
            "RunPodSandbox": (api.RunPodSandboxRequest, h.run_pod),  # type: ignore[dict-item]
            "StopPodSandbox": (api.StopPodSandboxRequest, h.stop_pod),  # type: ignore[dict-item]
            "RemovePodSandbox": (api.RemovePodSandboxRequest, h.remove_pod),  # type: ignore[dict-item]
            "CreateContainer": (api.CreateContainerRequest, h.create_container),  # type: ignore[dict-item]
            "StartContainer": (api.StartContainerRequest, h.start_container),  # type: ignore[dict-item]
            "PostStartContainer": (api.PostStartContainerRequest, h.post_start_container),  # type: ignore[dict-item]
            "UpdateContainer": (api.UpdateContainerRequest, h.update_container),  # type: ignore[dict-item]
            "StopContainer": (api.StopContainerRequest, h.stop_container),  # type: ignore[dict-item]
            "RemoveContainer": (api.RemoveContainerRequest, h.remove_container),  # type: ignore[dict-item]
            "StateChange": (api.StateChangeEvent, h.state_change),  # type: ignore[dict-item]
            "UpdatePodSandbox": (api.UpdatePodSandboxRequest, h.update_pod),  # type: ignore[dict-item]
            # Subscribed to nothing that needs them, but a runtime may call them regardless.
            "PostUpdatePodSandbox": (api.PostUpdatePodSandboxRequest, _empty(api.PostUpdatePodSandboxResponse)),
            "PostCreateContainer": (api.PostCreateContainerRequest, _empty(api.PostCreateContainerResponse)),
            "PostUpdateContainer": (api.PostUpdateContainerRequest, _empty(api.PostUpdateContainerResponse)),
        }
        return {(PLUGIN_SERVICE, name): self._method(name, kind, fn) for name, (kind, fn) in table.items()}

    def _method(self, name: str, kind: type[Message],
                fn: Callable[[Message], Awaitable[Message]]) -> ttrpc.Handler:
        path = f"/{PLUGIN_SERVICE}/{name}"
        stats = self._calls.method(name, intercepted=True)
        call_ids = iter(range(1, 1 << 62))

        async def handle(payload: bytes) -> bytes:
            t0 = time.perf_counter_ns()
            dumper = self._hooks.dumper
            call_id = next(call_ids)
            dumped = dumper is not None and dumper.wants(path)
            if dumped and dumper is not None:
                dumper.request(path, call_id, payload)
            try:
                request = kind.FromString(payload)
            except DecodeError as e:
                # INTERNAL and this wording: what Go's ttRPC answers for a payload its
                # method cannot decode (pinned by tests/nri/interop).
                stats.error(grpc.StatusCode.INTERNAL)
                if dumped and dumper is not None:
                    dumper.reply(path, call_id, None, 0.0, grpc.StatusCode.INTERNAL, str(e))
                raise ttrpc.TtrpcError(ttrpc.Code.INTERNAL,
                                       f"ttrpc: error unmarshalling payload: {name}: {e}") from None
            failed_before = self._hooks.counts.failed
            reply = (await fn(request)).SerializeToString()
            ns = time.perf_counter_ns() - t0
            stats.latency.observe_ns(ns)
            if self._hooks.counts.failed != failed_before:
                stats.error(grpc.StatusCode.INTERNAL)  # answered, but the engine failed on it
            if dumped and dumper is not None:
                dumper.reply(path, call_id, reply, ns / 1e9)
            return reply

        return handle


def _status_code(code: int) -> grpc.StatusCode:
    return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)


def _empty(kind: type[A]) -> Callable[[Message], Awaitable[Message]]:
    async def reply(_: Message) -> Message:
        return kind()
    return reply


async def _sleep_or_stop(delay: float, stop: asyncio.Event) -> bool:
    """Sleeps `delay` seconds; True if `stop` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), delay)
        return True
    except TimeoutError:
        return False
