"""Owns the engine's live parts and applies configurations transactionally.

A configuration is validated and everything it needs is built first (policy,
dumper); only then is it switched in. If any step fails, what was in force
stays in force and the error names what was wrong.

The controller is the engine's surface for whatever feeds it: it is given a
`Feed` to hand its core to, and answers `stats()` with a snapshot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import yaml

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.bounded import clip
from cri_resmgr.buckets import HistogramSnapshot
from cri_resmgr.classes.hostfs import DryRun, HostFiles, HostRoot
from cri_resmgr.classes.sched import DryRunScheduler, Syscalls
from cri_resmgr.config import Config, ConfigError, DumpConfig, EngineSettings, parse_document, parse_modules, sources
from cri_resmgr.engine import adopt, realcpuset, snapshot, unmanaged
from cri_resmgr.engine.cache import Cache
from cri_resmgr.engine.classes import ClassControl, ClassesOnly, ClassStats
from cri_resmgr.engine.core import Core
from cri_resmgr.engine.cpuclasses import ORIGINALS_FILE, CpuClassControl, CpuClassStats
from cri_resmgr.engine.enforce import Enforcer, UpdateStats
from cri_resmgr.engine.nodectl import IRQ_ORIGINALS_FILE, RT_ORIGINALS_FILE, NodeControl, NodeStats, tuned
from cri_resmgr.engine.resmgr import Later, ManagerStats, Options, ResourceManager
from cri_resmgr.engine.runtime import RuntimeFailure, RuntimePort
from cri_resmgr.engine.usage import NodeUsage, node_usage
from cri_resmgr.policy.api import Assignment, Policy
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import PolicyInfo, Registry
from cri_resmgr.policy.schedclass import SchedClass
from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.transport.contract import UNCHANGED, DumpSink, Keep

log = logging.getLogger(__name__)
# An answer to what an operator did: never rate-limited (logsetup.Throttle).
UNTHROTTLED = {"unthrottled": True}


class Feed(Protocol):
    """What the controller needs of whatever feeds the engine its events (the relay's
    transport through `engine/cri.py`'s `TransportFeed`, the NRI plugin's hooks): to be
    told the engine's core in force (`engine/core.py`; None: the engine takes no
    event), and where to copy calls for dumping."""

    def reconfigure(self, *, engine: Core | None | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None: ...


class Dumper(DumpSink, Protocol):
    """A dumper as the controller uses it (`dump.Dumper` is one)."""

    def note(self, text: str) -> None: ...
    def reopen(self) -> None: ...
    def close(self) -> None: ...
    @property
    def dropped(self) -> int: ...


class DumperFactory(Protocol):
    """Builds the dumper a configuration asks for; raises OSError or ValueError
    when it cannot (a bad file, bad specs), which rejects the configuration."""

    def __call__(self, specs: list[str], file: str | None, fmt: str, redact: bool, /) -> Dumper: ...


@dataclass(frozen=True)
class ReconcileStats:
    runs: int = 0
    failed: int = 0
    gone: int = 0  # containers removed behind the relay's back, released
    adopted: int = 0  # running containers the relay did not know, placed
    resent: int = 0  # running containers whose cgroup's cpuset was not the policy's, sent it again


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's counters, for metrics."""

    policy: str  # the active policy
    decisions: int
    policy_errors: int
    released_on_exit: int
    exclusive_denied: int  # containers that asked for exclusive CPUs and run without them
    updates_sent: int
    updates_failed: int
    containers: int  # tracked by the cache
    dump_dropped: int | None  # None: no dumper
    decision_latency: HistogramSnapshot | None = None  # the active policy's decisions
    reconcile: ReconcileStats = ReconcileStats()
    classes: ClassStats = ClassStats()  # block I/O and RDT classes given and failed
    cpu_classes: CpuClassStats = CpuClassStats()  # each CPU class's CPUs, the writes refused
    updates_resent_after_start: int = 0  # raced the container's StartContainer, sent again after it
    resizes: int = 0  # in-place resizes the policy re-decided
    resizes_refused: int = 0  # resizes it could not meet (kubelet's update failed)
    reload: snapshot.ReloadStats = snapshot.ReloadStats()  # the last configuration tried, and the last success
    node: NodeStats = NodeStats()  # scheduling classes and IRQ affinity given and failed



@dataclass(frozen=True)
class _PolicyKey:
    """What a policy is built from: a configuration that changes none of it
    keeps the policy in force, allocations and all."""

    name: str
    reserved_cpu: object
    available_cpu: str | None
    options: str  # the policy's section, as canonical JSON
    reserved_namespaces: tuple[str, ...]
    fail_closed: bool


def _policy_key(name: str, config: Config) -> _PolicyKey:
    p = config.policy
    return _PolicyKey(name, p.reserved_cpu, p.available_cpu,
                      json.dumps(p.sections.get(name, {}), sort_keys=True, default=str),
                      p.reserved_namespaces, p.fail_closed)


class Controller:
    """Builds the resource manager, policy and dumper a configuration asks for,
    and swaps them into the feed."""

    def __init__(self, settings: EngineSettings, registry: Registry, feed: Feed, runtime: RuntimePort,
                 dumper_factory: DumperFactory, logger_setter: Callable[[bool], None] | None = None,
                 cgroups: realcpuset.CgroupReader | None = None, host_files: HostFiles | None = None):
        """`host_files`: where the class controllers read and write cgroup and resctrl
        files (default: the files under -host-root)."""
        self._settings = settings
        # What the reconcile reads the real cpusets with (engine/realcpuset.py).
        self._cgroups = cgroups if cgroups is not None else realcpuset.CgroupReader()
        self._registry = registry
        self._feed = feed
        self._runtime = runtime
        self._make_dumper = dumper_factory
        self._set_debug = logger_setter
        self._topology: Topology | None = None
        self._topology_summary: snapshot.TopologySummary | None = None
        self._config: Config | None = None
        # Stands in for -fallback-config when that is not given (the NRI plugin's
        # configuration text from the runtime).
        self._fallback: sources.Document | None = None
        self._policy_name = "none"
        self._resmgr: ResourceManager | None = None
        self._dumper: Dumper | None = None
        self._enforcer: Enforcer | None = None
        self._apply_lock = asyncio.Lock()
        # Serializes allocation changes. Every resource manager gets this one,
        # so a successor never changes allocations while its predecessor does.
        self._alloc_lock = asyncio.Lock()
        self._policy_key: _PolicyKey | None = None
        self._reconciled = ReconcileStats()
        self._reload = snapshot.ReloadStats()
        files = host_files if host_files is not None else HostRoot(settings.host_root)
        # Block I/O and RDT classes: the engine's own controller (engine/classes.py).
        self._classes = ClassControl(DryRun(files) if settings.dry_run else files, runtime, note=self._note)
        self._classes_only: ClassesOnly | None = None  # the none policy's StartContainer, when there are classes
        # CPU classes: frequencies, governors, C-states of the CPUs by who holds them (engine/cpuclasses.py).
        saved = os.path.join(settings.state_dir, ORIGINALS_FILE) if settings.state_dir and not settings.dry_run \
            else None
        self._cpu_classes = CpuClassControl(DryRun(files) if settings.dry_run else files, note=self._note, saved=saved)
        # Scheduling classes and IRQ affinity for the policy in force (engine/nodectl.py).
        self._node = NodeControl(DryRun(files) if settings.dry_run else files,
                                 DryRunScheduler(Syscalls()) if settings.dry_run else Syscalls(), runtime,
                                 lambda: self.topology().online, note=self._note,
                                 saved=os.path.join(settings.state_dir, IRQ_ORIGINALS_FILE)
                                 if settings.state_dir and not settings.dry_run else None,
                                 rt_saved=os.path.join(settings.state_dir, RT_ORIGINALS_FILE)
                                 if settings.state_dir and not settings.dry_run else None)

    # -- what the front end reads ----------------------------------------------------

    @property
    def config(self) -> Config | None:
        """The configuration in force; None until one has been applied."""
        return self._config

    @property
    def policy_name(self) -> str:
        return self._policy_name

    def stats(self) -> EngineStats:
        """The counters as they are now. Safe from another thread (metrics):
        each part is read once, so a concurrent switch gives old or new values."""
        resmgr, enforcer, dumper = self._resmgr, self._enforcer, self._dumper
        m = resmgr.stats() if resmgr is not None else ManagerStats()
        u = enforcer.stats() if enforcer is not None else UpdateStats()
        return EngineStats(policy=self._policy_name, decisions=m.decisions, policy_errors=m.policy_errors,
                           released_on_exit=m.released_on_exit, exclusive_denied=m.exclusive_denied,
                           updates_sent=u.sent, updates_failed=u.failed,
                           containers=m.containers, dump_dropped=dumper.dropped if dumper is not None else None,
                           decision_latency=m.decision_latency, reconcile=self._reconciled,
                           updates_resent_after_start=u.resent_after_start, classes=self._classes.stats(),
                           cpu_classes=self._cpu_classes.stats(),
                           resizes=m.resizes, resizes_refused=m.resizes_refused, reload=self._reload,
                           node=self._node.stats())

    def usage(self) -> NodeUsage | None:
        """The pools, free exclusive-capable CPUs per NUMA node and exclusive CPUs per
        container (engine/usage.py); None under the none policy. Safe from another thread."""
        resmgr = self._resmgr
        if resmgr is None or self._topology is None:
            return None
        return node_usage(self._policy_name, resmgr.policy, self._topology, resmgr.cache)

    def state(self) -> snapshot.EngineState:
        """What the relay decided, frozen: policy, pools, every container's placement,
        the configuration in force. Call it on the event loop (it reads the live cache);
        no I/O: the topology is summarised only once some policy discovered it."""
        resmgr, topo = self._resmgr, self._topology
        if topo is not None and self._topology_summary is None:
            self._topology_summary = snapshot.summarise(topo)
        cache = resmgr.cache if resmgr is not None else \
            self._classes_only.cache if self._classes_only is not None else None
        return snapshot.take(self._policy_name, resmgr.policy if resmgr is not None else None,
                             cache, self._topology_summary,
                             self._config, self._settings.dry_run, classes=self._classes.of,
                             reload=self._reload, cpu_classes=self._cpu_classes.stats(),
                             blockio_refused=self._classes.stats().refused,
                             narrowed=self._narrowed if resmgr is not None else None,
                             sched=self._node.sched_class_of, irqs=self._node.irq_affinity())

    def _narrowed(self, key: str) -> tuple[CPUSet, str] | None:
        """What the kernel enforces of a container's cpuset a parent cgroup narrows (the reconcile's finding)."""
        got = self._resmgr.narrowed(key) if self._resmgr is not None else None
        return (got.enforced, got.narrowed_by or "?") if got is not None else None

    async def current_state(self) -> snapshot.EngineState:
        """`state()`, and under the none policy (no cache) the runtime's running containers
        with their real cpusets, marked not managed (engine/unmanaged.py). On the event loop."""
        state = self.state()
        if self._resmgr is not None or self._runtime is None or self._config is None:
            return state
        try:
            seen = await unmanaged.observe(self._runtime, self._cgroups)
        except Exception as e:  # the runtime away: /state without them, /readyz says why
            log.debug("cannot list the runtime's containers for /state: %s", _one_line(e))
            return state
        return replace(state, containers=seen)

    def container_classes(self, container_id: str) -> tuple[str | None, str | None]:
        """The (blockio, rdt) classes of a container, by the runtime's id (the NRI plugin's adjustment)."""
        resmgr = self._resmgr
        cache = resmgr.cache if resmgr is not None else None  # under the none policy it is not known yet
        c = cache.by_id(container_id) if cache is not None else None
        return self._classes.choose(c) if c is not None else (None, None)

    def container_sched_class(self, container_id: str) -> SchedClass | None:
        """A new container's scheduling class, by the runtime's id (the NRI plugin's adjustment)."""
        resmgr = self._resmgr
        c = resmgr.cache.by_id(container_id) if resmgr is not None else None
        p = tuned(resmgr.policy) if resmgr is not None else None
        return p.scheduling_class(c.workload).cls if c is not None and p is not None else None

    def active_policy(self) -> Policy | None:
        """The policy in force (None: the none policy), for inspection only."""
        return self._resmgr.policy if self._resmgr is not None else None

    def topology(self) -> Topology:
        if self._topology is None:
            t = self._topology = discover(self._settings.host_root)
            nodes = ", ".join(f"{n} ({t.node_cpus(n) or 'memory only'})" for n in t.node_ids())
            packages = len(t.package_ids())
            log.info("topology: CPUs online %s (%d), isolated %s, offline %s; NUMA nodes %s; %d package%s",
                     t.online, len(t.online), t.isolated or "none", t.offline or "none", nodes,
                     packages, "" if packages == 1 else "s")
        return self._topology

    def reopen_dump(self) -> None:
        """Reopens the dump file, if one is being written (SIGHUP after logrotate)."""
        if self._dumper is not None:
            self._dumper.reopen()

    async def flush(self) -> None:
        """Waits until the container updates decided so far have been sent or given up on."""
        if self._enforcer is not None:
            await self._enforcer.flush()

    # -- health and reconcile ------------------------------------------------------------

    async def ready(self, timeout: float = 2.0) -> str | None:
        """None when ready: a configuration (and so its policy) is in force and the
        runtime answers Version; else why not, for /readyz."""
        if self._config is None:
            return "no configuration in force yet"
        try:
            await self._runtime.version(timeout)
        except Exception as e:  # whatever the channel raises, the answer is "not ready"
            return f"runtime at {self._runtime.path} does not answer Version: {_one_line(e)}"
        return None

    async def reconcile(self, later: Later | None = None) -> dict[str, int]:
        """One reconcile with the runtime (see `ResourceManager.reconcile`, and its
        `later`); nothing to do under the none policy. Raises what the runtime call raises."""
        resmgr = self._resmgr
        if resmgr is None:
            if self._classes_only is not None:  # classes under the none policy
                await self._classes_only.sync()
            return {"gone": 0, "adopted": 0, "resent": 0}
        r = self._reconciled
        try:
            counts = await resmgr.reconcile(self._runtime, later)
        except Exception:  # counted, and raised for the caller to log
            self._reconciled = replace(r, runs=r.runs + 1, failed=r.failed + 1)
            raise
        self._reconciled = replace(r, runs=r.runs + 1, gone=r.gone + counts["gone"],
                                   adopted=r.adopted + counts["adopted"], resent=r.resent + counts["resent"])
        # Classes: containers started behind the relay's back, new threads, lost rules.
        await self._classes.sync(resmgr.cache)
        await self._node.sync(resmgr.cache, resmgr.policy)
        return counts

    # -- sources ----------------------------------------------------------------------

    def initial_config(self) -> Config:
        return sources.initial_config(self._settings, self._registry.names(), self._fallback)

    def set_fallback(self, document: sources.Document | None) -> None:
        """A configuration document used where -fallback-config would be, when that
        is not given; read at the next `initial_config` or agent withdrawal."""
        self._fallback = document

    # -- applying -------------------------------------------------------------------------

    async def apply_agent(self, modules: dict[str, str], source: str = "agent") -> str | None:
        """The Config service's entry: None when accepted, else the error text."""
        if self._settings.force_config:
            return (f"configuration is forced from {self._settings.force_config} (-force-config); "
                    "agent configuration ignored")
        try:
            if modules:
                await self.apply(await asyncio.to_thread(parse_modules, modules, source, self._registry.names()))
            else:  # no ConfigMap applies to this node: what the relay uses without an agent
                await self.apply(sources.without_agent(self._settings, self._registry.names(), self._fallback))
        except ConfigError as e:
            log.error("rejected configuration from %s: %s", source, e, extra=UNTHROTTLED)
            self._reloaded(source, str(e))
            return str(e)
        sources.remember_agent_config(self._settings, modules)
        return None

    async def reload_forced(self) -> None:
        """SIGHUP: re-read -force-config; a bad file keeps the current configuration."""
        path = self._settings.force_config
        if not path:
            log.info("SIGHUP: no -force-config file to reload")
            return
        try:
            config = await asyncio.to_thread(
                lambda: parse_document(sources.read_config_file(path), path, self._registry.names()))
            await self.apply(config)
            log.info("SIGHUP: reloaded %s", path)
        except ConfigError as e:
            log.error("SIGHUP: keeping the current configuration: %s", e, extra=UNTHROTTLED)
            self._reloaded(path, str(e))

    async def apply(self, config: Config) -> None:
        async with self._apply_lock:
            try:
                await self._apply(config)
            except ConfigError as e:
                self._reloaded(config.source, str(e))
                raise
            self._reloaded(config.source)

    def _reloaded(self, source: str, error: str = "") -> None:
        """Records the outcome of a configuration (metrics, /state): refused with `error`, else in force."""
        now = time.time()
        self._reload = snapshot.ReloadStats(ok=not error, at=now, source=source, error=error,
                                   last_success_at=self._reload.last_success_at if error else now)

    async def _apply(self, config: Config) -> None:
        info = self._registry.lookup(config.policy.active or self._settings.policy)
        self._check_switch_allowed(config, info.name)
        # Build everything first; nothing in force changes until all of it is ready.
        classes = self._classes.prepare(config)  # RDT over-subscription is refused here
        key = _policy_key(info.name, config)
        # Off the event loop: checking a configuration never holds up the calls being
        # relayed (and every count in it is bounded by the node, so the check is short).
        policy = await asyncio.to_thread(self._checked_policy, info, config, key != self._policy_key)
        # CPU classes a kernel would refuse are refused here (the policy parsed them).
        cpu_classes = self._cpu_classes.prepare(policy if key != self._policy_key else self.active_policy(),
                                                self.topology, config.source)
        new_dumper = self._build_dumper(config)
        if key != self._policy_key:
            try:
                await self._switch_policy(info.name, policy, config)
            except Exception as e:
                if new_dumper is not self._dumper and new_dumper is not None:
                    new_dumper.close()
                raise ConfigError(f"{config.source}: applying policy {info.name} failed: {e}") from e
            self._policy_key = key
        self._swap_dumper(new_dumper)
        if self._set_debug:
            self._set_debug(config.logger.debug)
        self._config = config
        self._classes.switch(classes)
        self._cpu_classes.switch(cpu_classes)
        self._cpu_classes.decided(self.active_policy(), self._resmgr.cache if self._resmgr is not None else None)
        if self._resmgr is not None:
            self._classes_only = None
            await self._classes.sync(self._resmgr.cache)
            await self._node.sync(self._resmgr.cache, self._resmgr.policy)
        else:
            self._node.irqs(None)  # no policy: the IRQs get back what they had
            await self._classes_without_policy(config)
        log.info("configuration from %s in force: policy %s", config.source, self._policy_name)

    async def _classes_without_policy(self, config: Config) -> None:
        """Under the none policy, classes need StartContainer alone: intercepted only when
        the configuration has classes (without them, nothing is read)."""
        wanted = bool(config.blockio.classes or config.rdt.partitions)
        if wanted and self._classes_only is None:
            self._classes_only = ClassesOnly(self._classes, self._runtime, config.policy.reserved_namespaces)
            self._feed.reconfigure(engine=self._classes_only)
        if self._classes_only is not None:
            try:
                await self._classes_only.sync()  # without classes: clears what the last ones wrote
            except RuntimeFailure as e:  # the runtime away: the reconcile and each start try again
                log.warning("block I/O and RDT classes: cannot list the runtime's containers: %s", e.details)
        if not wanted and self._classes_only is not None:
            self._classes_only = None
            self._feed.reconfigure(engine=None)

    def _check_switch_allowed(self, config: Config, name: str) -> None:
        if self._config is not None and self._settings.disable_policy_switch and name != self._policy_name:
            raise ConfigError(f"{config.source}: policy.Active: switching from {self._policy_name} to "
                              f"{name} is disabled (-disable-policy-switch)")

    def _checked_policy(self, info: PolicyInfo, config: Config, build: bool) -> Policy | None:
        """The policy the configuration asks for when `build` (None for one that decides
        nothing, or when not `build`), after every other policy section it gives is
        checked on this node too (`check_sections`)."""
        policy = build_policy(info, config, self.topology) if build else None
        check_sections(self._registry, config, info.name, self.topology)
        return policy

    def _build_dumper(self, config: Config) -> Dumper | None:
        """The dumper the configuration asks for: the one in force when its dump settings are unchanged."""
        wanted = self._dump_settings(config)
        if self._config is not None and wanted == self._dump_settings(self._config):
            return self._dumper
        if not wanted.specs:
            return None
        try:
            return self._make_dumper(list(wanted.specs), wanted.file, wanted.format, not wanted.unredacted)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{config.source}: dump: {e}") from None

    def _swap_dumper(self, new_dumper: Dumper | None) -> None:
        if new_dumper is self._dumper:
            return
        old = self._dumper
        self._dumper = new_dumper
        self._feed.reconfigure(dumper=new_dumper)
        if old is not None:
            old.close()

    def _dump_settings(self, config: Config) -> DumpConfig:
        """The configuration's dump module when it names any specs, else the dump flags."""
        return config.dump if config.dump.specs else self._settings.dump

    async def _switch_policy(self, name: str, policy: Policy | None, config: Config) -> None:
        if policy is None:
            await self._switch_to_none(name)
            return
        if self._enforcer is None:
            self._enforcer = Enforcer(self._runtime)
        old = self._resmgr
        async with self._alloc_lock:
            if old is not None:
                cache, saved = old.cache, old.assignments() if old.policy_name == name else None
            else:
                cache, saved = await self._load_state(name, config)
            options = Options(dry_run=self._settings.dry_run, fail_closed=config.policy.fail_closed,
                              reserved_namespaces=config.policy.reserved_namespaces)
            resmgr = ResourceManager(name, policy, cache, self._enforcer, self._alloc_lock, options,
                                     note=self._note, cgroups=self._cgroups, classes=self._classes,
                                     cpu_classes=self._cpu_classes, node=self._node)
            # Restored first: a policy refusing the change (its containers cannot fit)
            # leaves the old manager in force, saves and all.
            try:
                resmgr.restore(saved, live=old is not None)
            except Exception as e:
                if old is not None:
                    raise
                # At start-up policies place best-effort; one that still refuses (a state
                # it cannot read back, a pod it trips over) gets every container anew,
                # and failing that, every container by its CRI resources alone: the
                # relay must serve, whatever pods the node runs.
                log.error("cannot restore the saved allocations (%s: %s): placing every container anew",
                          type(e).__name__, clip(str(e), 200))
                try:
                    resmgr.restore(None)
                except Exception as again:
                    log.error("cannot place the containers as they are (%s: %s): placing them by their "
                              "CRI resources, without their annotations", type(again).__name__,
                              clip(str(again), 200))
                    for c in cache:
                        c.workload = replace(c.workload, pod_annotations={}, container_annotations={})
                    resmgr.restore(None)
            if old is not None:
                old.retire()
            self._resmgr = resmgr
            self._policy_name = name
            self._feed.reconfigure(engine=resmgr)

    async def _switch_to_none(self, name: str) -> None:
        """The none policy: intercept nothing, give containers all CPUs back."""
        old = self._resmgr
        if old is not None:
            async with self._alloc_lock:
                self._reset_all(old)
            old.retire()
        self._resmgr = None
        self._policy_name = name
        self._feed.reconfigure(engine=None)

    async def _load_state(self, name: str, config: Config) -> tuple[Cache, Mapping[str, Assignment] | None]:
        """The saved state and the runtime's containers (lock held): the cache, and
        the saved allocations when they were made by the same policy."""
        cache = Cache(self._settings.state_dir)
        loaded = cache.load()
        saved = loaded.assignments if loaded is not None and loaded.policy == name else None
        if loaded is not None and loaded.policy != name:
            log.info("policy changed from %s to %s since the last run: re-allocating every container",
                     loaded.policy, name)
        await adopt.adopt(self._runtime, cache, config.policy.reserved_namespaces)
        return cache, saved

    def _reset_all(self, old: ResourceManager) -> None:
        cpus = str(self.topology().online)
        reset = 0
        for c in old.cache:
            if c.id and not c.released and self._enforcer is not None and not self._settings.dry_run:
                self._enforcer.submit(c.id, pb.LinuxContainerResources(cpuset_cpus=cpus), c.workload)
                reset += 1
        if reset:
            log.info("updating %d containers to cpuset %s: no policy decides any more", reset, cpus)

    def _note(self, text: str) -> None:
        if self._dumper is not None:
            self._dumper.note(text)

    async def close(self) -> None:
        if self._resmgr is not None:
            await self._resmgr.close()
        await self._node.close()  # IRQ affinities and RT budgets back as they were
        if self._enforcer is not None:
            await self._enforcer.close()
        if self._dumper is not None:
            self._dumper.close()
            self._dumper = None


def build_policy(info: PolicyInfo, config: Config, topology: Callable[[], Topology],
                 quiet: bool = False) -> Policy | None:
    """The policy `config` asks for on this hardware (None for one that decides nothing);
    raises ConfigError naming what is wrong. `-print-config` checks a configuration with it.
    `quiet`: only checked (a section of a policy not in force), not logged."""
    if info.factory is None:
        return None
    try:
        context = build_context(topology(), available=config.policy.available_cpu,
                                reserved=config.policy.reserved_cpu,
                                options=config.policy.sections.get(info.name, {}))
        policy: Policy = info.factory(context)
    except ValueError as e:  # ConfigValueError and the like: the configuration is wrong
        raise ConfigError(f"{config.source}: {e}") from None
    # Anything else (a TypeError above all) is a bug in the policy and propagates
    # as one, rather than being reported as a rejected configuration.
    if not quiet:
        log.info("policy %s (configuration from %s): available CPUs %s, reserved %s",
                 info.name, config.source, context.available, context.reserved or "none")
    return policy


def check_sections(registry: Registry, config: Config, active: str, topology: Callable[[], Topology]) -> None:
    """Builds, on this node, the policy of every section the configuration gives but
    the active one (built anyway): a mistake in a policy not in force (an unknown
    key, MinCPUs past the node's CPUs) is refused now, naming the key, rather than
    found when that policy is switched to, maybe at a restart. ConfigError if not."""
    for name in sorted(config.policy.sections):
        info = registry.lookup(name)
        if info.name == active or info.factory is None:
            continue
        build_policy(info, config, topology, quiet=True)


def _one_line(e: Exception) -> str:
    text = e.details if isinstance(e, RuntimeFailure) else str(e)
    return " ".join(str(text).split()) or type(e).__name__


class AgentConfig:
    """The controller as the Config service (config/service.py) of either front end sees
    it: configuration the agent pushes, and what is in force, as module -> YAML text."""

    def __init__(self, controller: Controller):
        self._c = controller

    async def apply(self, data: dict[str, str], source: str) -> str | None:
        return await self._c.apply_agent(data, source)

    def current(self) -> dict[str, str]:
        if self._c.config is None:
            return {}
        return {k: yaml.safe_dump(v, sort_keys=False) for k, v in self._c.config.to_document().items()}
