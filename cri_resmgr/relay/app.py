"""Wires the relay's parts together and runs them until SIGTERM/SIGINT: the runtime
channels, the transport and the runtime probe, around the services it shares with the NRI
plugin (`frontend/services.py`: the periodic reconcile among them, in the relay's words)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from cri_resmgr import __version__
from cri_resmgr.config import ConfigError, Settings
from cri_resmgr.config.settings import DISABLED
from cri_resmgr.engine.cri import TransportFeed
from cri_resmgr.engine.runtime import RuntimeFailure, RuntimePort
from cri_resmgr.frontend import reconcile, sdnotify
from cri_resmgr.frontend.services import Services, StartFailed
from cri_resmgr.policy.registry import Registry
from cri_resmgr.relay.runtime import CriRuntime
from cri_resmgr.transport import sockets
from cri_resmgr.transport.contract import Transport
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.grpcrelay import GrpcRelay
from cri_resmgr.transport.methods import MethodTable
from cri_resmgr.transport.upstream import Upstream

# The name its lines carried before it moved: log filters and -logger-debug (logsetup.SOURCES) match it.
log = logging.getLogger("cri_resmgr.app")
# The periodic reconcile's lines (frontend/reconcile.py).
RECONCILE = reconcile.Wording(log, "containers gone behind the relay's back")

STOP_GRACE_SECONDS = 5.0
RUNTIME_PROBE_PERIOD = 5.0  # seconds between the relay's own Version calls (metrics' runtime_up)
RUNTIME_PROBE_TIMEOUT = 2.0


def validate(settings: Settings) -> None:
    """Checks the relay's own settings before anything starts; raises ValueError."""
    if settings.runtime_socket == DISABLED and settings.image_socket == DISABLED:
        raise ValueError("both the runtime and the image service are disabled ('-'): nothing to relay")
    relay = sockets.strip_scheme(settings.relay_socket)
    if settings.relay_transport == "h2" and _separate_image_socket(settings):
        raise ValueError("-relay-transport h2 relays to one socket, but the image socket "
                         f"{settings.image_socket} differs from the runtime socket {settings.runtime_socket}; "
                         "use -relay-transport grpc (or auto)")
    for name, path in (("runtime", settings.runtime_socket), ("image", settings.image_socket),
                       ("config", settings.config_socket), ("agent", settings.agent_socket)):
        if path != DISABLED and sockets.strip_scheme(path) == relay:
            raise ValueError(f"the {name} socket and the relay socket are the same path: {relay}")


def _separate_image_socket(settings: Settings) -> bool:
    return DISABLED not in (settings.runtime_socket, settings.image_socket) and \
        sockets.strip_scheme(settings.runtime_socket) != sockets.strip_scheme(settings.image_socket)


def make_relay(settings: Settings, runtime: Upstream | None, image: Upstream | None,
               methods: MethodTable, primary: Upstream) -> Transport:
    """The transport: frames straight through when there is one upstream socket."""
    if settings.relay_transport == "grpc" or _separate_image_socket(settings):
        # GrpcRelay drops its runtime channel when runtime_enabled is False, so with
        # the runtime service disabled it is given the primary one only to fill the slot.
        return GrpcRelay(settings.relay_socket, runtime or primary, image, methods, interceptors={},
                         socket_like=primary.path, runtime_enabled=runtime is not None,
                         timed=bool(settings.metrics_address))
    # Calls are timed only when metrics are served (-metrics-address): `make bench` shows the cost.
    return FrameRelay(settings.relay_socket, primary.path, methods, interceptors={}, socket_like=primary.path,
                      runtime_enabled=runtime is not None, image_enabled=image is not None,
                      timed=bool(settings.metrics_address))


async def _probe_runtime_every(runtime: RuntimePort, relay: Transport, period: float) -> None:
    """Version on the relay's own channel every `period` seconds, told to the transport: with
    no call passing (the none policy, a quiet node) cri_resmgr_runtime_up would otherwise say 1
    long after the runtime went away."""
    while True:
        await asyncio.sleep(period)
        try:
            await runtime.version(timeout=RUNTIME_PROBE_TIMEOUT)
        except RuntimeFailure as e:
            relay.runtime_probed(False, f"{e.reason}: {e.details}")
        except OSError as e:
            relay.runtime_probed(False, str(e))
        else:
            relay.runtime_probed(True)


def _upstreams(settings: Settings) -> tuple[Upstream | None, Upstream | None, Upstream]:
    """The runtime and image channels (None: disabled; one channel when they share
    a socket), and the primary one: the runtime's, else the image service's."""
    runtime = None if settings.runtime_socket == DISABLED else Upstream(settings.runtime_socket)
    if settings.image_socket == DISABLED:
        image = None
    elif runtime is not None and sockets.strip_scheme(settings.image_socket) == runtime.path:
        image = runtime
    else:
        image = Upstream(settings.image_socket)
    primary = runtime or image
    if primary is None:  # validate() refuses these settings before run() is called
        raise ValueError("both the runtime and the image service are disabled ('-'): nothing to relay")
    return runtime, image, primary


async def _runtime_ready(primary: Upstream, timeout: float | None, stop: asyncio.Event) -> bool:
    """Waits for the runtime to answer Version (logged); False if stopped first."""
    ready = asyncio.ensure_future(primary.wait_ready(timeout=timeout))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({ready, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        ready.cancel()
        log.info("stopped while waiting for the runtime")
        return False
    stopped.cancel()
    try:
        version = ready.result()
    except TimeoutError as e:
        raise StartFailed(str(e)) from None
    log.info("runtime %s %s (CRI %s) at %s", version.runtime_name, version.runtime_version,
             version.runtime_api_version, primary.path)
    return True


async def run(settings: Settings, registry: Registry, set_debug: Callable[[bool], None] | None = None) -> int:
    log.info("cri-resmgr %s starting", __version__)  # the first line: which build wrote this log
    async with contextlib.AsyncExitStack() as stack:  # whatever way this returns, it undoes the start
        try:
            return await _run(Services(stack, settings), settings, registry, set_debug)
        except StartFailed as e:
            log.error("%s", e)
            return 1


async def _run(services: Services, settings: Settings, registry: Registry,
               set_debug: Callable[[bool], None] | None) -> int:
    # Refuse early if another relay is live, before waiting on the runtime; and if another
    # front end (a relay on another socket, the NRI plugin) manages the state directory.
    try:
        sockets.prepare(sockets.strip_scheme(settings.relay_socket))
        if settings.config_socket != DISABLED:  # another relay's, live: not ours to take over
            sockets.prepare(sockets.strip_scheme(settings.config_socket), "config")
    except sockets.SocketError as e:
        raise StartFailed(str(e)) from None
    services.lock_state("cri-resmgr relay")
    http = services.listen_http()
    # The runtime channels only now: a refused start leaves no gRPC channel to its exit.
    runtime, image, primary = _upstreams(settings)
    for up in {id(u): u for u in (runtime, image) if u is not None}.values():
        services.at_end_async(up.close)
    stop = services.stop_event()
    if not await _runtime_ready(primary, settings.runtime_wait_timeout, stop):
        return 0

    methods = MethodTable()
    relay = make_relay(settings, runtime, image, methods, primary)
    port = CriRuntime(primary)
    controller = services.engine(registry, TransportFeed(relay), port, methods, set_debug)
    try:
        await controller.apply(controller.initial_config())
    except ConfigError as e:
        raise StartFailed(str(e)) from None
    services.reload_on_sighup(controller)

    # A start that fails stops the relay at once; a stop asked for gives calls in flight the grace.
    grace = 0.0

    async def stop_relay() -> None:
        await relay.stop(grace)

    services.at_end_async(stop_relay)
    try:
        await relay.start()
        await services.serve_config(controller)
    except Exception as e:  # bind failures and the like: one clear line, no traceback
        raise StartFailed(f"cannot serve: {e}") from None
    services.serve_http(http, controller, relay)
    # Supervised (supervise.py): an error nobody expected is logged and the task restarted.
    services.reconcile(controller, RECONCILE)  # a no-op while the none policy is in force
    if http is not None:  # runtime_up is read only there
        services.supervise("runtime probe", lambda: _probe_runtime_every(port, relay, RUNTIME_PROBE_PERIOD))
    services.export_node(controller)
    log.info("policy %s active; reconciling with the runtime %s", controller.policy_name,
             f"every {settings.reconcile_period:g}s" if settings.reconcile_period > 0 else "never (disabled)")
    # Type=notify: systemd starts kubelet (Before=kubelet.service) only now that the relay serves.
    sdnotify.notify("READY=1", f"STATUS=serving CRI on {settings.relay_socket}")
    await stop.wait()
    sdnotify.notify("STOPPING=1")
    log.info("shutting down")
    grace = STOP_GRACE_SECONDS
    return 0
