"""Block I/O and RDT classes, enforced by the resource manager itself (any runtime).

The class of a container is decided without I/O (`classes/select.py`); this module
learns where the container is (its PID and cgroups path, from the runtime port's
detail of it: containerd's and CRI-O's verbose info under the relay, what NRI reported
under the plugin) and has the writers (`classes/blockio.py`, `classes/rdt.py`) put it there:
after StartContainer, for every container when a configuration is applied (start-up
included), and in the periodic reconcile, which also moves a container's new threads
into its RDT group and restores block I/O rules that were lost.

A configuration is checked against the hardware in `prepare` (RDT: CLOSes and cache
bits), before anything in force changes; a machine without resctrl or a blkio/io
controller gets one warning and classes that are chosen but not enforced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.bounded import short
from cri_resmgr.classes import blockio, cgroups, rdtplan
from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.classes.rdt import ResctrlWriter
from cri_resmgr.classes.select import KINDS, Choice, annotation_key, choose
from cri_resmgr.config.classes import ClassConfigError
from cri_resmgr.config.schema import Config, ConfigError
from cri_resmgr.engine import adopt
from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.engine.core import Bystander, StartStep
from cri_resmgr.engine.runtime import NotFound, RuntimeFailure, RuntimePort
from cri_resmgr.engine.snapshot import Refused

log = logging.getLogger(__name__)

# A StartContainer's reply waits for the class rules: never longer than this on the runtime.
LOCATE_TIMEOUT = 2.0


@dataclass(frozen=True)
class ClassStats:
    """Counters for metrics: containers given a class (by kind and class, counted when a
    container gets it), annotations naming an unknown class, failed enforcements by kind
    (a refused block I/O line once per container, not per retry); and the block I/O lines
    the kernel refuses now (status, a gauge)."""

    assignments: Mapping[tuple[str, str], int] = field(default_factory=dict)
    unknown: int = 0
    failures: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    refused: tuple[Refused, ...] = ()


@dataclass(frozen=True)
class Prepared:
    """A configuration's classes as this machine will enforce them."""

    config: Config
    blockio: Mapping[str, blockio.Limits]
    rdt: rdtplan.RdtPlan | None  # None: no resctrl here, or no RDT classes


class ClassControl:
    """One per controller; survives policy switches. `files` is the host (a dry-run
    wraps it), `runtime` tells where a container is, `note` copies what is written to the dump."""

    def __init__(self, files: HostFiles, runtime: RuntimePort, note: Callable[[str], None] | None = None):
        self._files = files
        self._runtime = runtime
        self._mode = cgroups.mode(files)
        self._blkio = blockio.BlkioWriter(files, self._mode or "v1", note) if self._mode else None
        self._rdt = ResctrlWriter(files, note)
        self._prepared: Prepared | None = None
        self._where: dict[str, cgroups.Where] = {}  # container id -> where the runtime put it
        self._chosen: dict[str, tuple[Choice, Choice]] = {}  # container key -> (blockio, rdt)
        # Container ids whose cgroup holds our rules (whose tasks are in one of our groups)
        # as far as this process knows; a container seen for the first time is checked once
        # (what a previous run wrote is cleared if its class is gone).
        self._blockio_touched: set[str] = set()
        self._rdt_touched: set[str] = set()
        self._seen: set[str] = set()
        self._warned: set[str] = set()  # one warning per missing thing
        # One warning per unknown class per container: (kind, name) by container key,
        # forgotten with the container (a node's churn would grow a set of them for ever).
        self._unknown_warned: dict[str, set[tuple[str, str]]] = {}
        self._assignments: dict[tuple[str, str], int] = {}
        self._unknown = 0
        self._failures = {k: 0 for k in KINDS}
        # The block I/O lines the kernel refuses, by container id: (file, line) -> (class,
        # the container's name, the refusal). Written again each reconcile (a disk's scheduler
        # may become BFQ), said once per class, file, line and reason while a configuration
        # is in force (`_refusals_said`).
        self._refused: dict[str, dict[tuple[str, str], tuple[str, str, blockio.Refusal]]] = {}
        self._refusals_said: set[tuple[str, str, str, str]] = set()
        self._stats = ClassStats()

    # -- what others read ------------------------------------------------------------

    def stats(self) -> ClassStats:
        """Safe from another thread (metrics): a snapshot replaced, never changed, on the loop."""
        return self._stats

    def _counted(self) -> None:
        self._stats = ClassStats(assignments=dict(self._assignments), unknown=self._unknown,
                                 failures=dict(self._failures), refused=self._refused_now())

    def _refused_now(self) -> tuple[Refused, ...]:
        """The refused lines, one per class, file, line and reason, with how many containers."""
        seen: dict[tuple[str, str, str, str], Refused] = {}
        for held in self._refused.values():
            for cls, who, r in held.values():
                key = (cls, r.name, r.line, r.reason)
                was = seen.get(key)
                seen[key] = Refused(cls, r.name, r.line, r.reason, 1, who, r.path) if was is None else \
                    Refused(cls, r.name, r.line, r.reason, was.containers + 1, was.example, was.path)
        return tuple(seen[k] for k in sorted(seen))

    def of(self, key: str) -> tuple[str | None, str | None]:
        """The (blockio, rdt) classes given to a container, by its key (for /state)."""
        chosen = self._chosen.get(key)
        return (chosen[0].name, chosen[1].name) if chosen is not None else (None, None)

    def choose(self, c: ContainerRecord) -> tuple[str | None, str | None]:
        """The (blockio, rdt) classes `c` is to get, decided now (the NRI plugin names them
        in a new container's adjustment, before it starts)."""
        b, r = self._choices(c)
        return b.name, r.name

    def _choices(self, c: ContainerRecord) -> tuple[Choice, Choice]:
        p = self._prepared
        if p is None:
            return Choice(None), Choice(None)
        w = c.workload
        return (choose(w.effective_annotation(annotation_key("blockio")), w.qos.value, p.config.blockio.classes,
                       p.config.blockio.qos_classes),
                choose(w.effective_annotation(annotation_key("rdt")), w.qos.value, p.config.rdt.classes,
                       p.config.rdt.qos_classes))

    # -- configuration ---------------------------------------------------------------

    def prepare(self, config: Config) -> Prepared:
        """The classes of `config` on this machine; raises ConfigError naming the key
        when the hardware cannot give them (RDT over-subscription)."""
        limits = {}
        for name, rules in config.blockio.classes.items():
            limits[name], unmatched = blockio.resolve(rules, self._files)
            for glob in unmatched:
                log.warning("%s: blockio.Classes.%s: %s matches no block device under %s", config.source,
                            name, glob, self._files.show("/"))
            if limits[name].weight is not None and self._mode is not None:
                disks = blockio.unweighed_disks(self._files, self._mode)
                if disks is not None:
                    log.warning("%s: blockio.Classes.%s: the cgroup's Weight %d counts on no disk here: a weight "
                                "counts only on a disk whose I/O scheduler is bfq%s, and none is (%s); it is written "
                                "all the same", config.source, name, limits[name].weight,
                                " or with io.cost enabled" if self._mode == "v2" else "", ", ".join(disks))
            for dev, values in sorted(limits[name].devices.items()):
                why = blockio.weight_unsupported(self._files, self._mode, dev) if "weight" in values else None
                if why is not None:
                    log.warning("%s: blockio.Classes.%s: the Weight of %s will not take: %s; the class's other "
                                "rules are written", config.source, name, dev, why)
        if config.blockio.classes and self._mode is None:
            self._warn_once("blockio", "block I/O classes are chosen but not enforced: no blkio (cgroup v1) "
                            f"or io (cgroup v2) controller under {self._files.show(cgroups.CGROUP_ROOT)}")
        plan = None
        if config.rdt.partitions:
            if not self._rdt.mounted:
                self._warn_once("resctrl", f"RDT classes are chosen but not enforced: no resctrl at "
                                f"{self._rdt.where()} (not mounted, or no RDT on this machine)")
            else:
                try:
                    plan = rdtplan.plan(config.rdt, self._rdt.info())
                except ClassConfigError as e:
                    raise ConfigError(f"{config.source}: {e}") from None
                except (OSError, ValueError) as e:
                    raise ConfigError(f"{config.source}: rdt: cannot read {self._rdt.where()}/info: {e}") from None
                for note in plan.notes:
                    log.info("%s: rdt: %s", config.source, note)
        return Prepared(config=config, blockio=limits, rdt=plan)

    def switch(self, prepared: Prepared) -> None:
        """Puts the prepared groups in place (resctrl); containers follow with `sync`."""
        self._prepared = prepared
        self._refusals_said.clear()  # a new configuration says again what the kernel refuses of it
        plan = prepared.rdt
        if plan is None and not self._rdt.groups():
            return
        try:
            done = self._rdt.apply(plan.schemata if plan is not None else {})
        except OSError as e:
            self._failures["rdt"] += 1
            self._counted()
            log.error("rdt: configuring the resctrl groups failed: %s", e)
            return
        if done:
            log.info("rdt: %s", "; ".join(done))

    # -- containers --------------------------------------------------------------------

    async def started(self, c: ContainerRecord) -> None:
        """After StartContainer: the container's classes go in place now."""
        if self._prepared is None or not c.id or not self._relevant(c):
            return
        where = await self._locate(c)
        if where is not None:
            self._enforce(c, where)

    async def sync(self, records: Iterable[ContainerRecord], present: set[str] | None = None) -> None:
        """Every live container (start-up, a new configuration, the periodic reconcile);
        `present`: the ids the runtime lists, when known, to forget the others."""
        if self._prepared is None:
            return
        every = list(records)
        live = [c for c in every if c.id and not c.released and c.state != "exited"]
        ids = {c.id for c in live} if present is None else present
        for gone in [i for i in self._where if i not in ids]:
            self._forget(gone)
        keys = {c.key for c in every}
        for key in [k for k in self._chosen if k not in keys]:
            del self._chosen[key]
        for key in [k for k in self._unknown_warned if k not in keys]:
            del self._unknown_warned[key]
        for c in live:
            if not self._relevant(c):
                continue
            where = await self._locate(c)
            if where is not None:
                self._enforce(c, where)

    def _relevant(self, c: ContainerRecord) -> bool:
        """Whether anything is to be done for `c`: a configuration with classes, or a
        class it had (to clear)."""
        p = self._prepared
        if p is None:
            return False
        return bool(p.config.blockio.classes or p.config.rdt.partitions) or c.id in self._blockio_touched \
            or c.id in self._rdt_touched or c.key in self._chosen

    def _forget(self, container_id: str) -> None:
        self._where.pop(container_id, None)
        if self._refused.pop(container_id, None):
            self._counted()
        self._blockio_touched.discard(container_id)
        self._rdt_touched.discard(container_id)
        self._seen.discard(container_id)

    async def _locate(self, c: ContainerRecord) -> cgroups.Where | None:
        known = self._where.get(c.id)
        if known is not None:
            return known
        try:
            detail = await self._runtime.container_detail(c.id, LOCATE_TIMEOUT)
        except NotFound:
            return None  # gone: nothing to do
        except RuntimeFailure as e:  # the reconcile tries again
            log.warning("%s: cannot learn where its cgroups are: ContainerStatus: %s", c.workload, e.details)
            return None
        where = cgroups.Where(pid=detail.pid, cgroups_path=detail.cgroups_path, container_id=c.id)
        if where.pid <= 0 and not where.cgroups_path:
            self._warn_once("where", f"the runtime at {self._runtime.path} tells neither PID nor cgroupsPath "
                            "of its containers: block I/O and RDT classes cannot be enforced")
            return None
        self._where[c.id] = where
        return where

    def _enforce(self, c: ContainerRecord, where: cgroups.Where) -> None:
        p = self._prepared
        assert p is not None
        w = c.workload
        chosen = self._choices(c)
        for kind, choice, known in zip(KINDS, chosen, (p.config.blockio.classes, p.config.rdt.classes), strict=True):
            if choice.unknown is None:
                continue
            warned = self._unknown_warned.setdefault(c.key, set())
            if (kind, choice.unknown) not in warned:
                warned.add((kind, choice.unknown))
                log.warning("%s: %s class %s is not in the configuration (classes: %s); the container runs "
                            "without one", w, kind, short(choice.unknown), ", ".join(sorted(known)) or "none")
                self._unknown += 1
                self._counted()
        before = self._chosen.get(c.key)
        self._chosen[c.key] = (chosen[0], chosen[1])
        for i, kind in enumerate(KINDS):
            name = chosen[i].name
            if name is not None and (before is None or before[i].name != name):
                self._assignments[(kind, name)] = self._assignments.get((kind, name), 0) + 1
                self._counted()
                log.info("%s: %s class %s (%s)", w, kind, name, "annotation" if chosen[i].source == "annotation"
                         else f"default of QoS class {w.qos.value}")
        first = c.id not in self._seen
        self._seen.add(c.id)
        if first and p.config.blockio.classes:
            self._blockio_touched.add(c.id)  # a previous run may have written rules: read and clear them
        if first and p.config.rdt.partitions:
            self._rdt_touched.add(c.id)
        self._enforce_blockio(c, where, chosen[0].name, p)
        self._enforce_rdt(c, where, chosen[1].name, p)

    def _enforce_blockio(self, c: ContainerRecord, where: cgroups.Where, name: str | None, p: Prepared) -> None:
        if self._blkio is None or self._mode is None or (name is None and c.id not in self._blockio_touched):
            return
        d = cgroups.container_dir(self._files, self._mode, where)
        if d is None:
            return  # gone meanwhile: nothing to do
        missing = self._blkio.missing(d)
        if missing:
            self._warn_once("blkio-files", f"block I/O: the container cgroups here have no {', '.join(missing)} "
                            f"(first seen in {self._files.show(d)}): rules that need them fail")
        written = self._blkio.write(d, p.blockio.get(name, blockio.NONE) if name else blockio.NONE, str(c.workload))
        if written.refused and not self._files.exists(d):
            written = blockio.Written(written.done)  # the container went meanwhile, its cgroup with it
        self._refusals(c, name or "(none)", written.refused)
        if name is not None:
            self._blockio_touched.add(c.id)
        elif not written.refused:  # else touched still: what is left to clear is tried again
            self._blockio_touched.discard(c.id)

    def _refusals(self, c: ContainerRecord, cls: str, refused: tuple[blockio.Refusal, ...]) -> None:
        """Keeps what the kernel refused of `c`'s class; counts a refusal new to the container,
        says one new to the class (file, line, reason) with the reason, once."""
        before = self._refused.get(c.id, {})
        now = {(r.name, r.line): (cls, str(c.workload), r) for r in refused}
        if now == before:
            return
        fresh = [r for k, (_, _, r) in now.items() if k not in before or before[k][2].reason != r.reason]
        self._failures["blockio"] += len(fresh)
        if now:
            self._refused[c.id] = now
        else:
            self._refused.pop(c.id, None)
        self._counted()
        untold = [r for r in fresh if (cls, r.name, r.line, r.reason) not in self._refusals_said]
        if not untold:
            return
        self._refusals_said.update((cls, r.name, r.line, r.reason) for r in untold)
        why = {blockio.weight_unsupported(self._files, self._mode, r.line.split()[0]) for r in untold
               if r.reason.startswith("EOPNOTSUPP")}
        hints = sorted(w for w in why if w is not None)
        log.warning("%s: block I/O class %s: the kernel refused %s%s; the class's other lines are written. Said "
                    "once per class, file and line; `cri-resmgr status` shows what is refused now",
                    c.workload, cls, "; ".join(str(r) for r in untold), f" ({'; '.join(hints)})" if hints else "")

    def _enforce_rdt(self, c: ContainerRecord, where: cgroups.Where, name: str | None, p: Prepared) -> None:
        plan = p.rdt
        if plan is None or not self._rdt.mounted or self._mode is None:
            return
        group = name if name is not None and name in plan.schemata else None
        if group is None and c.id not in self._rdt_touched:
            return
        tids = cgroups.threads(self._files, self._mode, where)
        try:
            if group is None:
                self._rdt.release(tids, str(c.workload))
            else:
                self._rdt.move(group, tids, str(c.workload))
        except OSError as e:
            self._failures["rdt"] += 1
            self._counted()
            log.error("%s: moving its tasks to RDT class %s failed: %s", c.workload, group or "(root)", e)
            return
        if group is None:
            self._rdt_touched.discard(c.id)
        else:
            self._rdt_touched.add(c.id)

    def _warn_once(self, key: str, text: str) -> bool:
        if key in self._warned:
            return False
        self._warned.add(key)
        log.warning("%s", text)
        return True


class ClassesOnly(Bystander):
    """Classes under a policy that decides nothing (`none`): a core that takes one event
    (StartContainer), with a cache of the runtime's containers kept from its lists, so the
    class controller has the pods' annotations and QoS classes it chooses by."""

    def __init__(self, classes: ClassControl, runtime: RuntimePort, reserved_namespaces: tuple[str, ...]):
        self._classes = classes
        self._runtime = runtime
        self._reserved = reserved_namespaces
        self.cache = Cache()

    @property
    def events(self) -> frozenset[str]:
        return frozenset({"StartContainer"})

    async def start(self, container_id: str, start: StartStep) -> None:
        await start()
        try:
            await self.refresh()
            c = self.cache.by_id(container_id)
            if c is not None:
                await self._classes.started(c)
        except RuntimeFailure as e:  # the next reconcile tries again
            log.warning("block I/O and RDT classes of container %s: %s", container_id[:12], e.details)
        except Exception:  # a bug here must not fail the container's start
            log.exception("enforcing the block I/O and RDT classes of container %s failed", container_id[:12])

    async def refresh(self) -> None:
        """The cache follows the runtime's running containers (new ones asked about once)."""
        live = {c.id: c for c in await self._runtime.containers(LOCATE_TIMEOUT) if c.state != "exited"}
        for record in self.cache:
            if record.id not in live:
                self.cache.remove_container(record.key)
        live_pods = {c.pod_id for c in live.values()}  # once: not per pod (P x C on each start)
        for pod_id in [p for p in self.cache.pods if p not in live_pods]:
            self.cache.remove_pod(pod_id)
        unknown = [c for c in live.values() if self.cache.by_id(c.id) is None]
        if unknown:
            for record in await adopt.unknown_containers(self._runtime, self.cache, unknown, self._reserved):
                record.state = "running"
                self.cache.add_container(record)

    async def sync(self) -> None:
        await self.refresh()
        await self._classes.sync(self.cache)
