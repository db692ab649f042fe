"""Wires the NRI plugin's parts together and runs them until SIGTERM/SIGINT.

The same engine as the relay's (`engine.controller.Controller`), fed by NRI hooks
instead of intercepted CRI calls, with the same configuration sources, state
directory (locked against a relay: `frontend/statelock.py`), Config service, metrics,
/healthz, /readyz, /state and dump, wired by the same services (`frontend/services.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from cri_resmgr import __version__
from cri_resmgr._proto import nri_api_pb2
from cri_resmgr.config import ConfigError, Settings
from cri_resmgr.config.sources import Document
from cri_resmgr.engine.controller import Controller
from cri_resmgr.frontend import reconcile
from cri_resmgr.frontend.services import Services, StartFailed
from cri_resmgr.nri.hooks import Hooks
from cri_resmgr.nri.plugin import Identity, Plugin
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.policy.registry import Registry
from cri_resmgr.topology import TopologyError
from cri_resmgr.transport.methods import CRI_MODULES, MethodTable

log = logging.getLogger(__name__)
# The periodic reconcile's lines (frontend/reconcile.py): it catches up with events missed
# (a hook that timed out), from what NRI reported.
RECONCILE = reconcile.Wording(log, "containers gone")

DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_PLUGIN_NAME = "cri-resmgr"
DEFAULT_PLUGIN_INDEX = "90"
# How long after Configure a Synchronize is waited for before the plugin says it got none.
SYNC_GRACE = 5.0
FREEZE_DELAY = 0.1  # after the reply that ends start-up has gone out


@dataclass(frozen=True)
class NriSettings:
    socket: str = DEFAULT_NRI_SOCKET
    identity: Identity = Identity(DEFAULT_PLUGIN_NAME, DEFAULT_PLUGIN_INDEX)
    handed_fd: int | None = None  # NRI_PLUGIN_SOCKET: a connection the runtime made for us
    runtime_classes: bool = False  # -nri-runtime-classes: blockio_class/rdt_class in the adjustment


def _freeze_start_up() -> None:
    """What start-up built (modules, topology, policy, adopted containers) lives as
    long as the process: moved out of the collector's reach, so that its full
    passes, which stall a hook, scan only what came after (docs/benchmarks.md).
    What `_freeze_so_far` froze is collected too (its garbage with the rest's)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _freeze_so_far() -> None:
    """At activation: what is there so far (modules, topology, policy) out of the
    collector's reach without collecting it (a full pass takes tens of ms, in a reply
    then), so that the first Synchronize's adoptions do not make a full pass over it
    (issue 37). `_freeze_start_up` collects it, after the Synchronize's reply."""
    gc.freeze()


class Synchronizer:
    """What Configure and Synchronize do to the engine. The first Configure activates:
    the configuration (and so the policy) is in force from then on, with the saved
    state restored as saved (the view is partial: nothing is judged gone). Synchronize,
    when the runtime sends one, reconciles with everything it reports: containers gone
    meanwhile are released, unknown ones adopted. A runtime that sends none (containerd
    before 1.7.26 to a plugin it launched) is noted once; containers that predate the
    plugin are then adopted when an event names them (`adopt_soon`)."""

    def __init__(self, controller: Controller, runtime: NriRuntime, failed: Callable[[str], None],
                 runtime_config: Callable[[], str] = str, overridden_by: str | None = None,
                 grace: float = SYNC_GRACE):
        self._c = controller
        self._runtime = runtime
        self._failed = failed
        # ConfigureRequest.config, and the flag that takes its place if one was given.
        self._runtime_config = runtime_config
        self._overridden_by = overridden_by
        self._grace = grace
        self._tasks: set[asyncio.Future[None]] = set()  # held until done: the loop keeps weak references
        self._adopting: asyncio.Future[None] | None = None
        # The activation under way: a Synchronize that comes before it is done (Configure
        # answered at its deadline) waits for it rather than applying the configuration again.
        self._activating: asyncio.Future[None] | None = None
        self.activated_after: float | None = None  # seconds from Configure to active, for metrics and bench
        self._frozen = False

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

    async def configured(self) -> None:
        """At each Configure: the first activates (once, however many wait for it)."""
        if self._c.config is not None:
            return
        if self._activating is None or self._activating.done():  # done: it failed, try again
            self._activating = self._spawn(self._activate())
        await asyncio.shield(self._activating)

    async def _activate(self) -> None:
        t0 = time.monotonic()
        self._take_runtime_config()
        try:
            await self._c.apply(self._c.initial_config())
        except ConfigError as e:
            self._failed(str(e))
            return
        self.activated_after = time.monotonic() - t0
        log.info("policy %s active (%.0f ms after Configure)", self._c.policy_name, self.activated_after * 1000)
        if not self._frozen:
            _freeze_so_far()
        self._spawn(self._expect_synchronize())

    async def __call__(self) -> None:
        """At each Synchronize: everything the runtime has, reconciled."""
        if self._c.config is None:  # activation failed or is still under way: it decides first
            await self.configured()
            if self._c.config is None:
                return
        # Each adopted container's log line, and the collection of start-up's objects, come
        # after the reply (issue 37: the runtime gives the reply 2 s on a loaded node).
        counts = await self._c.reconcile(later=self._runtime.after_reply)
        log.info("synchronized: %(gone)d containers gone meanwhile, %(adopted)d adopted", counts)
        self._runtime.after_reply(self._freeze_soon)

    def _freeze_soon(self) -> None:
        """Once, after what start-up adopted is in place (the first Synchronize, or the
        grace without one), and not in a hook's reply time: a full collection of the
        start-up objects takes tens of ms."""
        if not self._frozen:
            self._frozen = True
            asyncio.get_running_loop().call_later(FREEZE_DELAY, _freeze_start_up)

    async def _expect_synchronize(self) -> None:
        await asyncio.sleep(self._grace)
        self._freeze_soon()
        if self._runtime.listing_complete:
            return
        name, version = self._runtime.runtime_name or "the runtime", self._runtime.runtime_version
        # containerd 1.7's NRI (before v0.7) sends none to plugins it launched; a newer runtime
        # sends one, later than the grace on a loaded node.
        why = "its NRI, before v0.7, sends none to plugins it launched" if _nri_before_v07(name, version) \
            else "none yet: a loaded runtime may send it later"
        log.warning("no Synchronize from %s %s within %gs of Configure (%s): containers that ran before this "
                    "plugin started are placed when an event or a Synchronize names them", name, version,
                    self._grace, why)
        deferred = self._runtime.release_deferred()
        if deferred:
            self._runtime.push(deferred, alone=True)

    def adopt_soon(self, container_id: str) -> None:
        """An event named a running container the plugin had not heard of: reconcile
        (which adopts it) right after the hook, once for a burst of them."""
        log.info("container %s was not reported to this plugin before: adopting it", container_id[:12])
        if self._adopting is None or self._adopting.done():
            self._adopting = self._spawn(self._adopt())

    async def _adopt(self) -> None:
        await asyncio.sleep(0)  # after the hook that named it
        try:
            counts = await self._c.reconcile()
        except Exception as e:  # logged; the periodic reconcile tries again
            log.warning("reconcile failed: %s", e)
            return
        if counts["adopted"]:
            log.info("reconcile: %(adopted)d containers adopted", counts)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel(self) -> None:
        for t in list(self._tasks):
            t.cancel()


async def run(settings: Settings, nri: NriSettings, registry: Registry,
              set_debug: Callable[[bool], None] | None = None) -> int:
    log.info("cri-resmgr %s starting as NRI plugin %s", __version__, nri.identity)
    async with contextlib.AsyncExitStack() as stack:  # whatever way this returns, it undoes the start
        try:
            return await _run(Services(stack, settings), settings, nri, registry, set_debug)
        except StartFailed as e:
            log.error("%s", e)
            return 1


async def _run(services: Services, settings: Settings, nri: NriSettings, registry: Registry,
               set_debug: Callable[[bool], None] | None) -> int:
    services.lock_state("cri-resmgr NRI plugin")
    http = services.listen_http()
    stop = services.stop_event()

    methods = MethodTable((*CRI_MODULES, nri_api_pb2))
    runtime = NriRuntime(nri.socket if nri.handed_fd is None else f"fd {nri.handed_fd}")
    controller: Controller
    hooks = Hooks(runtime, lambda: controller.flush())
    controller = services.engine(registry, hooks, runtime, methods, set_debug)
    if nri.runtime_classes:
        hooks.classes_of = controller.container_classes
        hooks.sched_of = controller.container_sched_class
    failure: list[str] = []

    def failed(why: str) -> None:
        log.error("%s", why)
        failure.append(why)
        stop.set()

    overridden_by = ("-force-config" if settings.force_config else
                     "-fallback-config" if settings.fallback_config else None)
    synchronizer = Synchronizer(controller, runtime, failed, lambda: hooks.runtime_config, overridden_by)
    services.at_end(synchronizer.cancel)
    hooks.on_configure = synchronizer.configured
    hooks.on_synchronize = synchronizer
    hooks.on_unknown = synchronizer.adopt_soon
    if (settings.policy != "none" or settings.force_config or settings.fallback_config
            or nri.handed_fd is not None):  # a launched plugin's configuration comes with Configure
        # Discovered before the runtime connects: the first Synchronize must answer in time.
        try:
            await asyncio.to_thread(controller.topology)
        except TopologyError as e:  # a -host-root the command line did not check (the none policy)
            raise StartFailed(str(e)) from None
    services.reload_on_sighup(controller)
    plugin = Plugin(nri.identity, hooks, runtime, socket_path=nri.socket, handed_fd=nri.handed_fd)

    try:
        await services.serve_config(controller)
    except Exception as e:  # a bind failure: one clear line
        raise StartFailed(f"cannot serve the Config service: {e}") from None
    services.serve_http(http, controller, plugin)
    services.reconcile(controller, RECONCILE)
    services.cancel_at_end(asyncio.ensure_future(
        _stop_on_shutdown(hooks.shutdown, plugin, stop, nri.handed_fd is not None)))
    code = await plugin.run(stop)
    log.info("shutting down")
    return 1 if failure else code


async def _stop_on_shutdown(shutdown: asyncio.Event, plugin: Plugin, stop: asyncio.Event, handed: bool) -> None:
    """A runtime that launched the plugin stops it with Shutdown; one we dialled will
    come back, and the plugin waits for it."""
    await shutdown.wait()
    if handed:
        stop.set()


def _nri_before_v07(runtime: str, version: str) -> bool:
    """containerd 1.x: its NRI predates v0.7 (containerd 2.0 brought v0.8)."""
    return runtime == "containerd" and version.lstrip("v").startswith("1.")
