"""The `balloons` policy: named CPU pools that inflate and deflate with their containers.

A container goes to a balloon of its type (assign.py): an existing one with
room, else a new one if MaxBalloons allows, else the one with the most room.
The balloon then takes its size: the sum of its containers' CPU requests
rounded up, within [MinCPUs, MaxCPUs] (sizing.py). Every member of a resized
balloon, and of balloons whose lent idle CPUs changed (idle.py), gets the new
cpuset in the decision's `others`. A request no balloon can hold is placed
best-effort and the decision carries a warning (logged and counted by the
engine); kubelet's call never fails for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cri_resmgr.policy import restore as restoring
from cri_resmgr.policy.api import Assignment, Decision, PolicyContext, PolicyError, Resources, Workload
from cri_resmgr.policy.balloons.assign import Balloon, namespace_ok, preference, type_for
from cri_resmgr.policy.balloons.book import Book
from cri_resmgr.policy.balloons.isolation import dedicated, dedicated_balloon, reclaim
from cri_resmgr.policy.balloons.resize import resize
from cri_resmgr.policy.balloons.restore import BalloonsRules
from cri_resmgr.policy.balloons.sizing import Nearness, cpus_for_request
from cri_resmgr.policy.balloons.types import DEFAULT, RESERVED, SECTION, BalloonType, check_node, parse_config
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import CpuClassLayout
from cri_resmgr.policy.irqs import Intent, Selection
from cri_resmgr.policy.pools import checked_cpus
from cri_resmgr.policy.schedclass import Choice
from cri_resmgr.policy.usage import PolicyUsage, PoolUsage
from cri_resmgr.topology.cpuallocator import AllocationError
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["BalloonsPolicy", "NAME", "DESCRIPTION"]

NAME = "balloons"
DESCRIPTION = "balloons: named CPU pools that inflate and deflate with their containers' requests"


class BalloonsPolicy:
    name = NAME
    # Creates pools (balloons) as containers come: the simulator checks that a new one spans
    # no L3 group or NUMA node while one had room for it (simulate/invariants.py).
    creates_pools = True

    def __init__(self, context: PolicyContext) -> None:
        self._config = parse_config(context.options)
        available, reserved = checked_cpus(context)
        assignable = available - reserved
        if not assignable:
            raise ConfigValueError(f"policy.ReservedResources.CPU: all available CPUs ({available}) are "
                                   "reserved; none left for balloons")
        self._topology = context.topology
        self._available = available
        self._restoring = False
        self._moved: tuple[set[Balloon], list[str]] = (set(), [])
        self._book = Book(self._config, Nearness(context.topology, reserved), assignable, reserved)
        self._check_minimums()
        self._book.clear()
        self._create_minimums()
        self._book.refresh(set(self._book.balloons.values()), self._book.free)

    @property
    def config(self) -> tuple[BalloonType, ...]:
        return self._config.types

    def _check_minimums(self) -> None:
        """MinBalloons x MinCPUs of all types must fit in the CPUs balloons are made of."""
        book = self._book
        threads = self._topology.threads_per_core()
        check_node(self._config, len(book.assignable), len(self._topology.online), threads)
        need = sum(t.min_balloons * t.min_cpus * (threads if t.hide_hyperthreads else 1)
                   for t in self._config.types if t.name != RESERVED)
        if need > len(book.assignable):
            raise ConfigValueError(
                f"{SECTION}.BalloonTypes: MinBalloons x MinCPUs of all types need {need} CPUs but only "
                f"{len(book.assignable)} are available to balloons ({book.assignable})")

    def _create_minimums(self) -> None:
        book = self._book
        for t in self._config.types:
            if t.name == RESERVED:
                continue
            while len(book.by_type[t.name]) < t.min_balloons:
                try:
                    book.new_balloon(t, t.min_cpus)
                except AllocationError as e:
                    raise ConfigValueError(f"{SECTION}.BalloonTypes: {t.name}: MinBalloons "
                                           f"{t.min_balloons} cannot be created: {e}") from None

    # -- placing -------------------------------------------------------------------------------

    def allocate(self, workload: Workload) -> Decision:
        return self.place(workload)[0]

    def place(self, workload: Workload) -> tuple[Decision, str | None]:
        """allocate, and the note saying that no balloon could hold the request (None when
        one could): a resize that moves the container is refused on it (resize.py)."""
        book = self._book
        if workload.key in book.member:
            raise PolicyError(f"{NAME}: container {workload.key} ({workload}) is already placed; release it first")
        old_free = book.free
        t, warning = type_for(self._config, workload, bool(book.reserved))
        self._moved = (set(), [])
        b, short = self._choose(t, workload)
        b.join(workload)
        book.member[workload.key] = b
        if b.type is not t:
            book.fallback.add(workload.key)  # in another type's balloon (default): kept there on restore
        lacking = book.resize(b)
        if lacking and dedicated_balloon(b):  # the pod's own balloon must grow: make room
            self._make_room(lacking, b)
            lacking = book.resize(b)
        changed, moved = self._moved
        notes = [f"{NAME}: {workload} ({workload.short_key}) in {b.name}: {m}" for m in moved]
        unmet = None
        if short or lacking:
            unit = "cores" if b.type.hide_hyperthreads else "CPUs"
            unmet = (f"{NAME}: no {t.name} balloon can hold {workload} ({workload.short_key}) with its "
                     f"{workload.cpu_request}m CPU request; placed best-effort in {b.name} "
                     f"({book.size(b)} {unit}, {b.requested}m requested)")
            notes.append(unmet)
        if notes:
            warning = "; ".join(([warning] if warning else []) + notes)
        others = book.refresh(changed | {b}, old_free, workload.key)
        return Decision(resources=b.resources, others=others, warning=warning), unmet

    def _make_room(self, units: int, keep: Balloon | None = None) -> None:
        """Move CPUs of balloons that are not dedicated to free, for a dedicated container
        (isolation.py); what moved is kept for the decision."""
        if self._restoring:
            return  # a restart or reconfiguration moves nothing that was not moved before
        changed, notes = reclaim(self._book, units, keep)
        self._moved[0].update(changed)
        self._moved[1].extend(notes)

    def _choose(self, t: BalloonType, w: Workload) -> tuple[Balloon, bool]:
        """The balloon for `w` (created if need be) and whether it is a best-effort pick.

        In the references' order: the balloon already holding the pod's containers (unless
        PreferSpreadingPods); with PreferNewBalloons an empty balloon (MinBalloons keeps
        them) or a new one; a balloon that holds the request without inflating, the one
        with the most room; one that can inflate to hold it; a new one."""
        book = self._book
        mine = book.by_type[t.name]
        if t.name == RESERVED:
            return mine[0], False
        free = book.free_units(t)
        fitting: list[tuple[tuple[int, ...], Balloon]] = []
        for b in mine:
            need = book.needed(b, w.cpu_request, 1)
            growth = max(need - book.size(b), 0)
            if (t.max_cpus is None or need <= t.max_cpus) and growth <= free and namespace_ok(t, b, w):
                fitting.append((preference(t, b, w, growth, book.size(b), free), b))
        if not t.spread_pods and not dedicated(t, w):  # (a dedicated container's CPUs are its own)
            same_pod = [item for item in fitting if item[1].has_pod(w) and not dedicated_balloon(item[1])]
            if same_pod:
                return min(same_pod, key=lambda item: item[0])[1], False
        first = max(cpus_for_request(w.cpu_request, 1), t.min_cpus)
        can_new = (t.can_add_balloon(len(mine)) and first <= free
                   and (t.max_cpus is None or first <= t.max_cpus))
        if t.prefer_new:
            empty = [item for item in fitting if not item[1].members]
            if empty:
                return min(empty, key=lambda item: item[1].index)[1], False
            if (not can_new and dedicated(t, w) and t.can_add_balloon(len(mine))
                    and (t.max_cpus is None or first <= t.max_cpus)):
                self._make_room(first - free)  # kubelet admitted it: other balloons' slack gives way
                can_new = first <= book.free_units(t)
            if can_new:
                return book.new_balloon(t, 0), False
            if t.can_add_balloon(len(mine)):
                # Short of CPUs even so (the requests do not fit): a dedicated container not
                # beside another pod's containers in their balloon, best-effort in the default
                # one; any other not into a balloon of dedicated containers, whose CPUs are
                # theirs alone. (When MaxBalloons is reached, sharing a balloon is what the
                # configuration asks for.)
                fitting = [] if dedicated(t, w) else [item for item in fitting if not dedicated_balloon(item[1])]
        if fitting:
            return min(fitting, key=lambda item: item[0])[1], False
        if can_new:
            return book.new_balloon(t, 0), False
        return self._best_effort(t, w), True

    def _best_effort(self, t: BalloonType, w: Workload) -> Balloon:
        """No balloon can hold the request: the type's balloon with the most room left,
        a new one if some CPUs are free, else the default balloon. No container goes into
        a balloon of dedicated containers (isolation.py: kubelet admitted them, their CPUs
        are theirs alone), and a dedicated one into no other pod's balloon."""
        book = self._book
        free = book.free_units(t)
        mine = [b for b in book.by_type[t.name] if (book.size(b) > 0 or free > 0) and not dedicated_balloon(b)]
        if dedicated(t, w):
            mine = [b for b in mine if not b.members]
        if mine:
            def room(b: Balloon) -> tuple[int, int]:
                cap = book.size(b) + free
                if t.max_cpus is not None:
                    cap = min(cap, t.max_cpus)
                return (cap * 1000 - b.requested, -b.index)
            return max(mine, key=room)
        if t.can_add_balloon(len(book.by_type[t.name])) and free >= max(t.min_cpus, 1):
            return book.new_balloon(t, 0)
        default = book.by_type[DEFAULT]
        return max(default, key=lambda b: (book.size(b) * 1000 - b.requested, -b.index))

    def release(self, key: str) -> Decision:
        book = self._book
        b = book.member.pop(key, None)
        if b is None:
            return Decision()
        old_free = book.free
        b.leave(key)
        book.fallback.discard(key)
        changed = {b}
        if not b.members and not book.is_fixed(b) and len(book.by_type[b.type.name]) > b.type.min_balloons:
            book.remove_balloon(b)
            changed.discard(b)
        else:
            book.resize(b)
        book.regrow_short(changed)
        return Decision(others=book.refresh(changed, old_free, key))

    def resize(self, workload: Workload) -> Decision:
        """policy.api.Resizable: in its balloon when that can take the new size, else moved
        to another; a size that cannot be met restores every balloon as it was (resize.py)."""
        return resize(self, workload)

    # -- restoring -------------------------------------------------------------------------------

    def restore(self, items: list[tuple[Workload, Assignment | None]], live: bool = False) -> Decision:
        """policy/restore.py's procedure with this policy's rules (restore.py); a restore
        moves no CPUs of balloons to make room for a dedicated container (`_make_room`)."""
        self._restoring = True
        try:
            return restoring.restore(self, BalloonsRules(self), items, live)
        finally:
            self._restoring = False

    def start_afresh(self) -> Callable[[], None]:
        """An empty book (restore.py); returns what puts back the one in force now."""
        before = self._book
        self._book = before.emptied()

        def undo() -> None:
            self._book = before
        return undo

    def checkpoint(self) -> Callable[[], None]:
        """What puts the policy back as it is now (a refused resize, resize.py): a copy of
        the book, swapped in. A restore could not: it keeps only the balloons that hold
        containers and makes MinBalloons up afresh, maybe elsewhere and by other names."""
        saved = self._book.copy()

        def undo() -> None:
            self._book = saved
        return undo

    # -- queries -------------------------------------------------------------------------------

    def resources(self, key: str) -> Resources | None:
        b = self._book.member.get(key)
        return None if b is None else b.resources

    def assignment(self, key: str) -> Assignment | None:
        b = self._book.member.get(key)
        return None if b is None else self._assignment(b, key in self._book.fallback)

    def assignments(self) -> Mapping[str, Assignment]:
        out: dict[str, Assignment] = {}
        fallback = self._book.fallback
        for b in self._book.balloons.values():
            if b.members:
                a = self._assignment(b)
                out.update(dict.fromkeys(b.members, a))
        for key in fallback:
            held = self._book.member.get(key)
            if held is not None:
                out[key] = self._assignment(held, True)
        return out

    def balloons(self) -> tuple[Balloon, ...]:
        """The balloons (live objects: for tests, benchmarks and diagnostics; do not change)."""
        return tuple(self._book.balloons.values())

    def balloon_of(self, key: str) -> Balloon | None:
        return self._book.member.get(key)

    @property
    def free(self) -> CPUSet:
        """CPUs in no balloon (idle; maybe lent)."""
        return self._book.free

    @property
    def book(self) -> Book:
        return self._book

    def cpu_classes(self) -> CpuClassLayout:
        """The configuration's CPU classes and which CPUs get which (policy/cpuclasses.py): a
        balloon's CPUs its type's CPUClass (a dedicated container's too), the CPUs in no
        balloon IdleCPUClass. A type's CPUClass without CPUClasses does nothing, as before."""
        classes = self._config.cpu_classes
        kinds = {t.name: t.cpu_class for t in self._config.types if t.cpu_class and t.cpu_class in classes}
        return CpuClassLayout(classes=classes, kinds=kinds, rest=self._config.idle_cpu_class,
                              cpus=self._available, exclusive_in_pool=True, annotations=False)

    def usage(self) -> PolicyUsage:
        book = self._book
        pools = []
        exclusive: dict[str, CPUSet] = {}
        for b in book.balloons.values():
            res = b.resources
            runs_on = res.cpuset_cpus if res else CPUSet()
            own = self._exclusive(b)
            if own:
                exclusive.update(dict.fromkeys(b.members, own))
            pools.append(PoolUsage(
                name=b.name, cpus=b.cpus, exclusive=own, shared=runs_on - own,
                kind=b.type.name, mems=(res.cpuset_mems or "") if res else "",
                containers=tuple(b.members), requested_milli=b.requested, hidden=self._hidden(b),
                kept=b.type.min_cpus))
        members = {b.name: len(b.members) for b in book.balloons.values()}
        return PolicyUsage(tuple(pools), book.free, exclusive, members)

    # -- scheduling classes and interrupts (policy/tuning.py's Tuned) ----------------------

    @property
    def tunes(self) -> bool:
        return bool(self._config.sched.classes or self._config.irqs)

    @property
    def moves_irqs(self) -> bool:
        return bool(self._config.irqs)

    def scheduling_class(self, workload: Workload) -> Choice:
        """The annotation's class, else its balloon type's SchedulingClass (the type it
        would get, before it is placed)."""
        b = self._book.member.get(workload.key)
        t = b.type if b is not None else type_for(self._config, workload, bool(self._book.reserved))[0]
        return self._config.sched.choose(workload, t.tuning.sched_class)

    def irq_intent(self) -> Intent:
        """Isolating balloons' CPUs avoided by every controllable IRQ; a sinking type's
        claimed IRQs on its balloons' CPUs (an IRQ two types claim: the first type's)."""
        irqs = self._config.irqs
        if not irqs:
            return Intent()
        avoid = CPUSet()
        sinks: dict[str, tuple[Selection, CPUSet]] = {}
        for b in sorted(self._book.balloons.values(), key=lambda b: b.type.order):
            tuning = b.type.tuning
            if tuning.irq_mode == "isolate":
                avoid = avoid | b.cpus
            elif tuning.irq_mode == "sink" and b.cpus:
                claim, cpus = sinks.get(b.type.name, (tuning.irq_claim, CPUSet()))
                sinks[b.type.name] = (claim, cpus | b.cpus)
        return Intent(controllable=irqs, avoid=avoid, sinks=tuple(sinks.values()))

    def _hidden(self, b: Balloon) -> CPUSet:
        """A HideHyperthreads balloon's sibling threads: its own (a whole core is the
        balloon's), but its containers get one thread of each core (Book.visible)."""
        if not b.type.hide_hyperthreads:
            return CPUSet()
        return b.cpus - self._book.near.hide_hyperthreads(b.cpus)

    def expects_isolation(self, w: Workload) -> bool:
        """Whether `w` is a dedicated container (isolation.py): for the simulator's check
        that Guaranteed containers do not share CPUs when the requests fit; the others
        share their balloon's CPUs by design."""
        t, _ = type_for(self._config, w, bool(self._book.reserved))
        return dedicated(t, w)

    def isolation_cap(self, w: Workload) -> int | None:
        """The most exclusive CPUs the configuration lets `w` hold (its balloon type's
        MaxCPUs; None: no cap), for the same check: a dedicated container that asks for more
        is placed short by design (a warning), no policy fault."""
        t, _ = type_for(self._config, w, bool(self._book.reserved))
        return t.max_cpus

    def exclusive_wanted(self, w: Workload) -> int:
        """How many exclusive CPUs a dedicated container asks for (its whole CPUs; 0 for the
        others, which share their balloon by design): `cri-resmgr status` marks a container
        holding fewer as a request not met, its type's MaxCPUs the reason or not."""
        whole, fraction = divmod(w.cpu_request, 1000)
        return whole if whole and not fraction and self.expects_isolation(w) else 0

    def _exclusive(self, b: Balloon) -> CPUSet:
        """A dedicated container alone in its balloon holds the balloon's CPUs exclusively
        (the lent idle CPUs it may also run on are not its own)."""
        if len(b.members) == 1 and dedicated_balloon(b):
            return b.cpus
        return CPUSet()


    def _assignment(self, b: Balloon, fallback: bool = False) -> Assignment:
        details: dict[str, object] = {"balloon": b.name, "type": b.type.name, "cpus": str(b.cpus)}
        if self._book.short(b):
            details["short"] = True  # placed best-effort: not enough CPUs for its requests
        if fallback:
            details["fallback"] = True  # best-effort in a balloon not of its type
        return Assignment(pool=b.name, exclusive=self._exclusive(b), details=details)
