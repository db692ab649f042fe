"""Scheduling classes and IRQ affinity, enforced by the engine for the policy in force
(docs/classes.md). The policy decides without I/O (`policy/tuning.py`'s `Tuned`: a
container's scheduling class, where the controllable IRQs may go); this module puts it on
the host:

- a container's scheduling class on each of its threads (`classes/sched.py`) right after
  its StartContainer, for every container when a configuration is applied, and in the
  reconcile for the threads that appeared since (a child forked later inherits its
  parent's class; one started before the class came does not). Where the threads are:
  the container's cgroup (its PID and cgroups path from the runtime port, once), else
  /proc/PID/task. On cgroup v1 with RT group scheduling, fifo and rr first need an RT
  budget up the container's cgroup chain (`classes/rtbudget.py`);
- the controllable IRQs' affinities (`classes/irqplan.py`, `classes/irq.py`) after every
  change of the allocations, only those that change; what they had comes back when
  nothing avoids their CPUs any more, when they stop being controllable, and at shutdown.
  What they had is also kept in the state directory (`IRQ_ORIGINALS_FILE`) while any is
  controllable: a run killed before its shutdown leaves them moved, and the next start
  gives them back (or takes that for their original when they are still controllable).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from cri_resmgr.classes import cgroups, irqplan
from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.classes.irq import IrqWriter
from cri_resmgr.classes.rtbudget import RtBudget
from cri_resmgr.classes.sched import Scheduler, apply_all
from cri_resmgr.engine import originals
from cri_resmgr.engine.cache import ContainerRecord
from cri_resmgr.engine.runtime import NotFound, RuntimeFailure, RuntimePort
from cri_resmgr.policy.api import Policy
from cri_resmgr.policy.irqs import NOTHING, Intent, Selection
from cri_resmgr.policy.schedclass import SchedClass
from cri_resmgr.policy.tuning import Tuned
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

LOCATE_TIMEOUT = 2.0
IRQ_ORIGINALS_FILE = "irq-originals.json"  # in the state directory (engine/originals.py)
RT_ORIGINALS_FILE = "rt-budget-originals.json"  # likewise: cpu.rt_runtime_us by cgroup, before our write
T = TypeVar("T")


@dataclass(frozen=True)
class NodeStats:
    """For metrics: containers given a scheduling class (by class), threads the kernel
    refused one, RT budgets it refused; IRQ affinity writes and failed writes."""

    sched_assignments: Mapping[str, int] = field(default_factory=dict)
    sched_failures: int = 0
    rt_budget_refused: int = 0
    irq_writes: int = 0
    irq_failures: int = 0


@dataclass
class _Given:
    cls: SchedClass
    tids: set[int] = field(default_factory=set)  # threads given it
    refused: bool = False  # said once that the kernel refuses it


def tuned(policy: Policy | None) -> Tuned | None:
    """The policy, when its configuration has scheduling classes or controllable IRQs.
    Asked on every decision and StartContainer: `tunes` is read, not `isinstance` of the
    runtime-checkable protocol, which looks every member up (~35 us, several times the
    decision itself, on a node that has none of it)."""
    return cast(Tuned, policy) if getattr(policy, "tunes", False) is True else None


class NodeControl:
    """One per controller; survives policy switches. `files` is the host (dry-run wraps
    it), `scheduler` the thread calls (dry-run's sets nothing), `online` the CPUs."""

    def __init__(self, files: HostFiles, scheduler: Scheduler, runtime: RuntimePort,
                 online: Callable[[], CPUSet], note: Callable[[str], None] | None = None,
                 saved: str | None = None, rt_saved: str | None = None):
        """`saved`: the file keeping the controllable IRQs' original affinities across a
        crash, `rt_saved` the RT budgets' (None: kept in this process only)."""
        self._files = files
        self._scheduler = scheduler
        self._runtime = runtime
        self._online = online
        self._note = note
        self._mode = cgroups.mode(files) or ("v1" if files.exists(f"{cgroups.CGROUP_ROOT}/cpu") else None)
        self._rt = RtBudget(files, note, keep=(lambda held: originals.save(
            rt_saved, {d: str(v) for d, v in held.items()}, "RT budgets")) if rt_saved is not None else None)
        if rt_saved is not None:
            self._rt.adopt({d: int(v) for d, v in originals.load(rt_saved, "RT budgets", "the cgroups").items()
                            if v.lstrip("-").isdigit()})
        self._irq = IrqWriter(files, note)
        self._saved = saved
        self._kept: dict[str, str] = {}  # what `saved` holds
        if saved is not None:
            self._kept = originals.load(saved, "IRQ affinity", "the IRQs")
            self._irq.adopt(_irq_originals(self._kept))
        self._selection: Selection = NOTHING
        self._planned: Intent | None = None  # the intent last planned and written
        self._policy: Policy | None = None  # the policy whose IRQs are to be planned
        self._dirty = False  # the allocations changed since the IRQs were last planned
        self._task: asyncio.Task[None] | None = None  # the round of IRQ file work under way
        self._where: dict[str, cgroups.Where] = {}
        self._given: dict[str, _Given] = {}  # container id -> its class and threads
        self._names: dict[str, str] = {}  # container key -> its class's name (/state)
        self._counts: dict[str, int] = {}
        self._failures = self._rt_refused = self._irq_writes = self._irq_failures = 0
        self._stats = NodeStats()

    def stats(self) -> NodeStats:
        return self._stats

    def _counted(self) -> None:
        self._stats = NodeStats(dict(self._counts), self._failures, self._rt_refused, self._irq_writes,
                                self._irq_failures)

    def sched_class_of(self, key: str) -> str | None:
        return self._names.get(key)

    def irq_affinity(self) -> dict[int, CPUSet]:
        """The controllable IRQs' affinities as this process knows them (/state); on the loop."""
        return self._irq.current() if self._selection else {}

    # -- scheduling classes ---------------------------------------------------------

    async def started(self, c: ContainerRecord, policy: Policy | None) -> None:
        """After StartContainer."""
        p = tuned(policy)
        if p is not None and c.id:
            await self._enforce(c, p)

    async def sync(self, records: Iterable[ContainerRecord], policy: Policy | None) -> None:
        """Every live container (a new configuration, the reconcile): new threads get
        their class, and the RT budgets of containers gone are given back."""
        live = [c for c in records if c.id and not c.released and c.state != "exited"]
        ids = {c.id for c in live}
        for gone in [i for i in self._given if i not in ids] + [i for i in self._where if i not in ids]:
            self.forget(gone)
        keys = {c.key for c in live}
        for key in [k for k in self._names if k not in keys]:
            del self._names[key]
        self._rt.retry()  # budgets the kernel would not take back yet
        p = tuned(policy)
        if p is not None:
            for c in live:
                await self._enforce(c, p)
        self.irqs(policy)

    def forget(self, container_id: str) -> None:
        self._given.pop(container_id, None)
        self._where.pop(container_id, None)
        self._rt.release(container_id)

    async def _enforce(self, c: ContainerRecord, p: Tuned) -> None:
        choice = p.scheduling_class(c.workload)
        if choice.unknown is not None and c.key not in self._names:
            log.warning("%s: scheduling class %r is not in the configuration; the container runs without one",
                        c.workload, choice.unknown)
        cls = choice.cls
        if cls is None:
            self._names.pop(c.key, None)
            self._given.pop(c.id, None)  # a class gone: its threads keep what they were given
            return
        given = self._given.get(c.id)
        if given is None or given.cls != cls:
            given = self._given[c.id] = _Given(cls)
            self._counts[cls.name] = self._counts.get(cls.name, 0) + 1
            self._names[c.key] = cls.name
            self._counted()
            log.info("%s: scheduling class %s (%s)%s", c.workload, cls.name, cls.describe(),
                     " (dry-run)" if self._scheduler.dry_run else "")
        where = await self._locate(c)
        if where is None:
            return
        tids = [t for t in self._threads(where) if t not in given.tids]
        if not tids:
            return
        if cls.policy in ("fifo", "rr") and self._rt.available() and where.container_id and self._mode == "v1":
            d = cgroups.container_dir(self._files, "v1", where, "cpu")
            why = self._rt.ensure(c.id, d) if d is not None else None
            if why is not None:
                self._rt_refused += 1
                self._counted()
                log.error("%s: scheduling class %s: %s", c.workload, cls.name, why)
        if self._scheduler.dry_run:
            text = f"dry-run: would set {c.workload} ({len(tids)} threads): {cls.describe()}"
            log.info("%s", text)
            if self._note is not None:
                self._note(text)
            given.tids.update(tids)
            return
        done, refused = apply_all(self._scheduler, tids, cls)
        given.tids.update(done)
        if refused is not None:
            given.tids.update(tids)  # said once; a new thread is tried again
            self._failures += 1
            self._counted()
            if not given.refused:
                given.refused = True
                log.error("%s: the kernel refuses scheduling class %s (%s) on %d of %d threads: %s", c.workload,
                          cls.name, cls.describe(), len(tids) - len(done), len(tids), refused.strerror or refused)
        elif self._note is not None:
            self._note(f"sched {c.workload}: {cls.describe()} on {len(done)} threads")

    async def _locate(self, c: ContainerRecord) -> cgroups.Where | None:
        known = self._where.get(c.id)
        if known is not None:
            return known
        try:
            detail = await self._runtime.container_detail(c.id, LOCATE_TIMEOUT)
        except NotFound:
            return None
        except RuntimeFailure as e:
            log.warning("%s: cannot learn its PID for its scheduling class: %s", c.workload, e.details)
            return None
        if detail.pid <= 0 and not detail.cgroups_path:
            return None
        where = self._where[c.id] = cgroups.Where(pid=detail.pid, cgroups_path=detail.cgroups_path,
                                                  container_id=c.id)
        return where

    def _threads(self, where: cgroups.Where) -> list[int]:
        """The container's threads: its cgroup's tasks (every process of it), else its
        PID's own threads."""
        if self._mode is not None:
            tids = cgroups.threads(self._files, self._mode, where)
            if tids:
                return tids
        if where.pid <= 0:
            return []
        return [int(t) for t in self._files.listdir(f"proc/{where.pid}/task") if t.isdigit()]

    # -- interrupts ------------------------------------------------------------------

    def irqs(self, policy: Policy | None) -> None:
        """The controllable IRQs where the policy wants them now (after every change of
        the allocations). On the event loop the files are read and written in a thread by
        one task at a time, changes that come meanwhile planned together after it: a
        Synchronize placing a hundred containers does not wait for any of it (nri-plugins
        #746). The plan is made without I/O; only IRQs whose affinity changes are written."""
        self._policy = policy
        p = tuned(policy)
        if not self._selection and (p is None or not p.moves_irqs) and not self._irq.adopted:
            return  # no IRQ is or was controllable: nothing to plan (every decision passes here)
        self._dirty = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            while self._dirty:
                self._round(lambda f, *a: f(*a))
            return
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._irq_rounds())

    async def _irq_rounds(self) -> None:
        async def off_loop(f: Callable[..., T], *args: object) -> T:
            return await asyncio.to_thread(f, *args)
        try:
            while self._dirty:
                await self._round_async(off_loop)
        except Exception:  # a bug here must not end the engine's task group
            log.exception("setting the controllable IRQs' affinities failed")

    async def _round_async(self, run: Callable[..., Awaitable[Any]]) -> None:
        self._dirty = False
        intent, selection = self._intent()
        if selection != self._selection or self._irq.adopted:  # an earlier run's IRQs: taken or given back
            self._selection = selection
            self._planned = None
            await run(self._irq.select, selection)
        targets = self._targets(intent)
        if targets is not None:
            self._done(intent, await run(self._irq.write, targets))
        await run(self._keep)

    def _round(self, run: Callable[..., Any]) -> None:
        self._dirty = False
        intent, selection = self._intent()
        if selection != self._selection or self._irq.adopted:  # an earlier run's IRQs: taken or given back
            self._selection = selection
            self._planned = None
            run(self._irq.select, selection)
        targets = self._targets(intent)
        if targets is not None:
            self._done(intent, run(self._irq.write, targets))
        run(self._keep)

    def _intent(self) -> tuple[Intent | None, Selection]:
        p = tuned(self._policy)
        intent = p.irq_intent() if p is not None else None
        return intent, intent.controllable if intent is not None else NOTHING

    def _targets(self, intent: Intent | None) -> dict[int, CPUSet] | None:
        """What to write for `intent` (None: nothing, it is what was last written)."""
        if intent is None or not self._irq.irqs or intent == self._planned:
            return None
        self._planned = intent
        return irqplan.changes(irqplan.plan(self._irq.irqs, self._online(), intent), self._irq.current())

    def _done(self, intent: Intent | None, result: tuple[int, list[str]]) -> None:
        written, errors = result
        self._wrote(written, errors)
        if written and intent is not None:
            log.info("irq: %d of %d controllable IRQs moved (avoiding CPUs %s%s)", written, len(self._irq.irqs),
                     intent.avoid or "none", f", {len(intent.sinks)} sinks" if intent.sinks else "")

    def _wrote(self, written: int, errors: list[str]) -> None:
        self._irq_writes += written
        self._irq_failures += len(errors)
        if errors:
            self._planned = None  # written again at the next change
        if written or errors:
            self._counted()
        for e in errors:
            log.error("irq: %s", e)

    async def close(self) -> None:
        """Shutdown: the IRQs' affinities and the RT budgets go back to what they were."""
        if self._task is not None and not self._task.done():
            self._dirty = False
            await self._task  # a round under way finishes: what it wrote is known
        written, errors = self._irq.restore()
        self._wrote(written, errors)
        self._planned = None
        self._keep(self._irq.originals() if errors else self._irq.adopted)  # all given back: nothing held
        self._rt.close()

    def _keep(self, held: Mapping[int, CPUSet] | None = None) -> None:
        """The state file follows what is held (off the loop: it is a write)."""
        if self._saved is None:
            return
        now = {str(n): str(cpus) for n, cpus in (self._irq.originals() if held is None else held).items()}
        if now != self._kept:
            originals.save(self._saved, now, "IRQ affinity")
            self._kept = now


def _irq_originals(kept: Mapping[str, str]) -> dict[int, CPUSet]:
    out: dict[int, CPUSet] = {}
    for n, cpus in kept.items():
        try:
            out[int(n)] = CPUSet.parse(cpus)
        except ValueError:
            continue
    return out
