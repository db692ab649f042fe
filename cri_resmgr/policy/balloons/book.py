"""The balloons and the free CPUs: creating, resizing and removing balloons, and
working out which containers' cpusets a change touched.

Every balloon's containers share one Resources object: the balloon's CPUs (one
thread per core under HideHyperthreads) plus the idle CPUs lent to it. After a
change, `refresh` recomputes it for the balloons that changed and for those
whose lent CPUs may have (their share region meets the CPUs that became busy
or idle), and reports every member whose cpuset moved.
"""

from __future__ import annotations

import copy
import dataclasses

from cri_resmgr.policy.api import Resources
from cri_resmgr.policy.balloons.assign import Balloon, lowest_free_index
from cri_resmgr.policy.balloons.idle import lent_cpus
from cri_resmgr.policy.balloons.isolation import dedicated_balloon
from cri_resmgr.policy.balloons.sizing import Nearness, cpus_for_request
from cri_resmgr.policy.balloons.types import RESERVED, BalloonsConfig, BalloonType
from cri_resmgr.policy.pools import MemsOf
from cri_resmgr.topology.cpuallocator import AllocationError
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Book"]


class Book:
    def __init__(self, config: BalloonsConfig, near: Nearness, assignable: CPUSet, reserved: CPUSet,
                 mems: MemsOf | None = None) -> None:
        self.config = config
        self.near = near
        self.mems = mems or MemsOf(near.topology)
        self.assignable = assignable  # what balloons other than reserved are made of
        self.reserved = reserved
        self._prefer = {t.name: near.kind_cpus(t.priority) for t in config.types}
        self.balloons: dict[str, Balloon] = {}
        self.by_type: dict[str, list[Balloon]] = {t.name: [] for t in config.types}
        self.member: dict[str, Balloon] = {}
        self.fallback: set[str] = set()  # members placed best-effort in a balloon not of their type
        self.free = assignable

    def emptied(self) -> Book:
        """A new book of the same configuration and CPUs, cleared (see `clear`); this one
        is left as it is (a refused restore puts it back)."""
        book = Book(self.config, self.near, self.assignable, self.reserved, self.mems)
        book.clear()
        return book

    def copy(self) -> Book:
        """A copy that changes to this book leave as it is now (what a refused resize puts
        back): the balloons, their members and the maps of them copied; the configuration,
        the CPU sets (immutable) and the caches of the topology shared."""
        book = copy.copy(self)
        twin = {b: dataclasses.replace(b, members=dict(b.members), pods=dict(b.pods))
                for b in self.balloons.values()}
        book.balloons = {name: twin[b] for name, b in self.balloons.items()}
        book.by_type = {name: [twin[b] for b in lst] for name, lst in self.by_type.items()}
        book.member = {key: twin[b] for key, b in self.member.items()}
        book.fallback = set(self.fallback)
        return book

    def clear(self) -> None:
        self.balloons.clear()
        for lst in self.by_type.values():
            lst.clear()
        self.member.clear()
        self.fallback.clear()
        self.free = self.assignable
        if self.reserved:
            self.balloons_add(Balloon(self.config.reserved, 0, cpus=self.reserved))

    # -- sizes ---------------------------------------------------------------------------

    def size(self, b: Balloon) -> int:
        """The balloon's size as its type counts it: CPUs, or cores under HideHyperthreads."""
        return self.near.cores_in(b.cpus) if b.type.hide_hyperthreads else len(b.cpus)

    def free_units(self, t: BalloonType) -> int:
        return self.near.free_cores(self.free) if t.hide_hyperthreads else len(self.free)

    def target(self, b: Balloon, extra_milli: int = 0, extra_members: int = 0) -> int:
        """What the balloon should have: its requests rounded up, within [MinCPUs, MaxCPUs]."""
        need = cpus_for_request(b.requested + extra_milli, len(b.members) + extra_members)
        return b.type.clamp(need)

    def needed(self, b: Balloon, extra_milli: int, extra_members: int) -> int:
        """Unclamped CPUs (or cores) the balloon's requests with the extra need."""
        return max(cpus_for_request(b.requested + extra_milli, len(b.members) + extra_members), b.type.min_cpus)

    def short(self, b: Balloon) -> bool:
        """Its containers request more than it has (too few free CPUs, or above MaxCPUs)."""
        return bool(b.members) and not self.is_fixed(b) and self.needed(b, 0, 0) > self.size(b)

    def is_fixed(self, b: Balloon) -> bool:
        return b.type.name == RESERVED

    # -- changes -------------------------------------------------------------------------

    def balloons_add(self, b: Balloon) -> None:
        self.balloons[b.name] = b
        lst = self.by_type[b.type.name]
        lst.append(b)
        lst.sort(key=lambda x: x.index)
        self.free = self.free - b.cpus

    def new_balloon(self, t: BalloonType, size: int, index: int | None = None) -> Balloon:
        """A new balloon of `size` CPUs (cores): raises AllocationError when they are not free."""
        if index is None:
            index = lowest_free_index(x.index for x in self.by_type[t.name])
        b = Balloon(t, index)
        self.balloons_add(b)
        if self.grow(b, size) > 0:
            self.remove_balloon(b)
            raise AllocationError(size, self.free_units(t), self.free,
                                  f"a new {t.name} balloon needs {size} "
                                  f"{'cores' if t.hide_hyperthreads else 'CPUs'}; "
                                  f"only {self.free_units(t)} free")
        return b

    def remove_balloon(self, b: Balloon) -> None:
        del self.balloons[b.name]
        self.by_type[b.type.name].remove(b)
        self.free = self.free | b.cpus
        b.cpus = CPUSet()

    def kind_preference(self, t: BalloonType) -> CPUSet | None:
        """The CPUs of the core kind the type's AllocatorPriority prefers (None: any)."""
        return self._prefer.get(t.name)

    def grow(self, b: Balloon, n: int) -> int:
        """Take up to `n` more CPUs (cores) near the balloon's; returns the shortfall."""
        t = b.type
        take = min(n, self.free_units(t))
        if take > 0:
            prefer = self._prefer.get(t.name)
            given = CPUSet()
            swap = None
            if b.cpus and prefer is None and not t.spread_cores and dedicated_balloon(b):
                # Its containers' own CPUs: whole cores, as a create gives them (sizing.py).
                swap = self.near.inflate_whole(self.free, b.cpus, take)
            if swap is not None:
                new, given = swap
            elif t.hide_hyperthreads:
                new = self.near.inflate_cores(self.free, b.cpus, take, prefer, balance=t.balance)
            else:
                new = self.near.inflate(self.free, b.cpus, take, prefer, spread=t.spread_cores, balance=t.balance)
            self.free = (self.free - new) | given
            b.cpus = (b.cpus - given) | new
            b.share_region = None
        return n - max(take, 0)

    def shrink(self, b: Balloon, n: int) -> None:
        if n <= 0:
            return
        gone = self.near.deflate(b.cpus, n, b.type.hide_hyperthreads)
        b.cpus = b.cpus - gone
        self.free = self.free | gone
        b.share_region = None

    def resize(self, b: Balloon) -> int:
        """Bring the balloon to its target; returns the CPUs (cores) it still lacks."""
        if self.is_fixed(b):
            return 0
        size, target = self.size(b), self.target(b)
        if target > size:
            return self.grow(b, target - size)
        self.shrink(b, size - target)
        return 0

    def regrow_short(self, changed: set[Balloon]) -> None:
        """Balloons below target (CPUs were short) take freed CPUs."""
        for b in self.balloons.values():
            if not self.free:
                return
            if not self.is_fixed(b) and b.members and self.size(b) < self.target(b):
                before = b.cpus
                self.resize(b)
                if b.cpus != before:
                    changed.add(b)

    # -- what containers see ------------------------------------------------------------------

    def visible(self, b: Balloon) -> CPUSet:
        own = self.near.hide_hyperthreads(b.cpus) if b.type.hide_hyperthreads else b.cpus
        b.lent = lent_cpus(self.near, b, self.free, self.assignable)
        if not b.lent:
            return own
        lent = self.near.hide_hyperthreads(b.lent) if b.type.hide_hyperthreads else b.lent
        return own | lent

    def compute(self, b: Balloon) -> Resources | None:
        cpus = self.visible(b)
        if not cpus:
            if not b.members:
                return None
            # Containers in a balloon that got no CPU at all (none was free, or a dedicated
            # balloon took its CPUs): best-effort on the reserved CPUs (else the idle ones,
            # else all), until a CPU frees up (regrow_short).
            cpus = self.reserved or self.free or self.assignable
        return Resources(cpus, self.mems(cpus) if b.type.pin_memory else None)

    def refresh(self, changed: set[Balloon], old_free: CPUSet, subject: str | None = None) -> dict[str, Resources]:
        """Recompute what members see; the members (but `subject`) whose resources changed."""
        delta = old_free ^ self.free
        others: dict[str, Resources] = {}
        for b in self.balloons.values():
            if b not in changed:
                if b.type.share_idle is None or not delta:
                    continue
                if b.share_region is not None and b.share_region.isdisjoint(delta):
                    continue
            old = b.resources
            b.resources = new = self.compute(b)
            if new != old and new is not None and b.members:
                others.update(dict.fromkeys(b.members, new))
        if subject is not None:
            others.pop(subject, None)
        return others
