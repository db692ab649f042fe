"""Wires the NRI plugin's parts together and runs them until SIGTERM/SIGINT.

The same engine as the relay's (`engine.controller.Controller`), fed by NRI hooks
instead of intercepted CRI calls, with the same configuration sources, state
directory (locked against a relay: `statelock.py`), Config service, metrics,
/healthz, /readyz, /state and dump.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

from cri_resmgr import __version__, health, metrics, statelock, supervise
from cri_resmgr._proto import nri_api_pb2
from cri_resmgr.config import ConfigError, Settings
from cri_resmgr.config.service import ConfigServer
from cri_resmgr.config.settings import DISABLED
from cri_resmgr.config.sources import Document
from cri_resmgr.dump import Dumper
from cri_resmgr.engine.controller import AgentConfig, Controller
from cri_resmgr.nri.hooks import Hooks
from cri_resmgr.nri.plugin import Identity, Plugin
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.policy.registry import Registry
from cri_resmgr.status import endpoint
from cri_resmgr.transport import sockets
from cri_resmgr.transport.methods import CRI_MODULES, MethodTable

log = logging.getLogger(__name__)

DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_PLUGIN_NAME = "cri-resmgr"
DEFAULT_PLUGIN_INDEX = "90"


@dataclass(frozen=True)
class NriSettings:
    socket: str = DEFAULT_NRI_SOCKET
    identity: Identity = Identity(DEFAULT_PLUGIN_NAME, DEFAULT_PLUGIN_INDEX)
    handed_fd: int | None = None  # NRI_PLUGIN_SOCKET: a connection the runtime made for us


def _on_sighup(controller: Controller) -> None:
    """SIGHUP: re-read -force-config and reopen the dump file."""
    controller.reopen_dump()
    asyncio.ensure_future(controller.reload_forced())


def _freeze_start_up() -> None:
    """What start-up built (modules, topology, policy, adopted containers) lives as
    long as the process: moved out of the collector's reach, so that its full
    passes, which stall a hook, scan only what came after (docs/benchmarks.md)."""
    gc.collect()
    gc.freeze()


class Synchronizer:
    """What a Synchronize does to the engine: the first applies the configuration
    (adopting what the runtime reported, as the relay does at start-up); a later
    one, after a reconnection, reconciles with what the runtime reports now."""

    def __init__(self, controller: Controller, failed: Callable[[str], None],
                 runtime_config: Callable[[], str] = str, overridden_by: str | None = None):
        self._c = controller
        self._failed = failed
        # ConfigureRequest.config, and the flag that takes its place if one was given.
        self._runtime_config = runtime_config
        self._overridden_by = overridden_by

    def _take_runtime_config(self) -> None:
        text = self._runtime_config()
        if not text.strip():
            return
        if self._overridden_by is not None:
            log.warning("the runtime's configuration for this plugin (%d bytes) is ignored: %s is given",
                        len(text), self._overridden_by)
            return
        log.info("the runtime's configuration for this plugin (%d bytes) is the fallback configuration",
                 len(text))
        self._c.set_fallback(Document(text, "the runtime's configuration of this plugin (ConfigureRequest.config)"))

    async def __call__(self) -> None:
        if self._c.config is None:
            self._take_runtime_config()
            try:
                await self._c.apply(self._c.initial_config())
            except ConfigError as e:
                self._failed(str(e))
                return
            log.info("policy %s active", self._c.policy_name)
            _freeze_start_up()
            return
        counts = await self._c.reconcile()
        log.info("re-synchronized: %(gone)d containers gone meanwhile, %(adopted)d adopted", counts)


async def _reconcile_every(controller: Controller, period: float) -> None:
    """Catches up with events missed (a hook that timed out): cheap, from what NRI reported."""
    while True:
        await asyncio.sleep(period)
        try:
            counts = await controller.reconcile()
        except Exception as e:  # logged; the next period tries again
            log.warning("reconcile failed: %s", e)
            continue
        if counts["gone"] or counts["adopted"]:
            log.info("reconcile: %(gone)d containers gone, %(adopted)d adopted", counts)


async def run(settings: Settings, nri: NriSettings, registry: Registry,
              set_debug: Callable[[bool], None] | None = None) -> int:
    log.info("cri-resmgr %s starting as NRI plugin %s", __version__, nri.identity)
    try:
        lock = statelock.acquire(settings.state_dir, "cri-resmgr NRI plugin")
    except (statelock.StateDirBusy, OSError) as e:
        log.error("%s", e)
        return 1
    try:
        return await _run(settings, nri, registry, set_debug)
    finally:
        lock.release()


async def _run(settings: Settings, nri: NriSettings, registry: Registry,
               set_debug: Callable[[bool], None] | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    methods = MethodTable((*CRI_MODULES, nri_api_pb2))

    def make_dumper(specs: list[str], file: str | None, fmt: str, redact: bool) -> Dumper:
        return Dumper(specs, file=file, fmt=fmt, redact=redact, methods=methods, max_size=settings.dump_max_size)

    runtime = NriRuntime(nri.socket if nri.handed_fd is None else f"fd {nri.handed_fd}")
    controller: Controller
    hooks = Hooks(runtime, lambda: controller.flush())
    controller = Controller(settings.engine(), registry, hooks, runtime, make_dumper, set_debug)
    failure: list[str] = []

    def failed(why: str) -> None:
        log.error("%s", why)
        failure.append(why)
        stop.set()

    overridden_by = ("-force-config" if settings.force_config else
                     "-fallback-config" if settings.fallback_config else None)
    hooks.on_synchronize = Synchronizer(controller, failed, lambda: hooks.runtime_config, overridden_by)
    if (settings.policy != "none" or settings.force_config or settings.fallback_config
            or nri.handed_fd is not None):  # a launched plugin's configuration comes with Configure
        # Discovered before the runtime connects: the first Synchronize must answer in time.
        await asyncio.to_thread(controller.topology)
    loop.add_signal_handler(signal.SIGHUP, _on_sighup, controller)
    plugin = Plugin(nri.identity, hooks, runtime, socket_path=nri.socket, handed_fd=nri.handed_fd)

    config_server = None
    if settings.config_socket != DISABLED:
        try:
            config_server = ConfigServer(AgentConfig(controller), sockets.strip_scheme(settings.config_socket))
            await config_server.start()
        except Exception as e:  # a bind failure: one clear line
            log.error("cannot serve the Config service: %s", e)
            await controller.close()
            return 1
    http = None
    if settings.metrics_address:
        try:
            http = health.serve(settings.metrics_address, metrics.registry(controller, plugin),
                                health.on_loop(controller, loop), endpoint.on_loop(controller, loop))
        except OSError as e:
            log.error("cannot serve metrics on %s: %s", settings.metrics_address, e)
    reconciling = None
    if settings.reconcile_period > 0:
        reconciling = supervise.start("reconcile", lambda: _reconcile_every(controller, settings.reconcile_period))
    shutdown = asyncio.ensure_future(_stop_on_shutdown(hooks.shutdown, plugin, stop, nri.handed_fd is not None))
    code = await plugin.run(stop)
    log.info("shutting down")
    for task in (reconciling, shutdown):
        if task is not None:
            task.cancel()
    if http is not None:
        await asyncio.to_thread(http.shutdown)
    if config_server is not None:
        await config_server.stop()
    await controller.close()
    return 1 if failure else code


async def _stop_on_shutdown(shutdown: asyncio.Event, plugin: Plugin, stop: asyncio.Event, handed: bool) -> None:
    """A runtime that launched the plugin stops it with Shutdown; one we dialled will
    come back, and the plugin waits for it."""
    await shutdown.wait()
    if handed:
        stop.set()
