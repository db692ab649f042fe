"""A real-time budget for a container's cgroup chain, on cgroup v1 with RT group
scheduling (CONFIG_RT_GROUP_SCHED: the cpu hierarchy has `cpu.rt_runtime_us`).

There a thread may be SCHED_FIFO or SCHED_RR only in a cgroup whose `cpu.rt_runtime_us`
is above 0, and a new cgroup gets 0 (runc makes every container's so): sched_setattr
fails with EPERM. A cgroup's runtime must fit in its parent's, beside its siblings'. So
the chain from the hierarchy's root down to the container gets, parents first, what the
container needs (`FRACTION` of its period) plus what each level's other children already
hold; a level that has enough is left alone. The kernel has the last word: a write it
refuses (the root's 950000 us is spoken for) is reported in one line.

What was there is written back, children first, when no container that needed a level
needs it any more and at shutdown. `keep` hears what is held after each change (the
engine keeps it in the state directory), and `adopt` takes what a run killed before its
shutdown held: written back as soon as no container needs it. Paths are relative to the
host root (`hostfs`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.classes.hostfs import HostFiles

log = logging.getLogger(__name__)

CPU_ROOT = "sys/fs/cgroup/cpu"
RUNTIME = "cpu.rt_runtime_us"
PERIOD = "cpu.rt_period_us"
FRACTION = 0.05  # of the container's period: 50 ms of each second by default


@dataclass
class _Held:
    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)  # container id -> its chain, top first
    originals: dict[str, int] = field(default_factory=dict)  # dir -> what it held before we wrote
    pending: set[str] = field(default_factory=set)  # dirs to put back when the kernel lets us


class RtBudget:
    """One per controller. `note` hears each write, for the dump."""

    def __init__(self, files: HostFiles, note: Callable[[str], None] | None = None,
                 keep: Callable[[Mapping[str, int]], None] | None = None):
        self._files = files
        self._note = note
        self._keep = keep
        self._held = _Held()

    def adopt(self, originals: Mapping[str, int]) -> None:
        """What an earlier run wrote and did not put back: put back by the next `retry`
        that finds no container needing it."""
        for d, value in originals.items():
            if d.startswith(CPU_ROOT + "/") and ".." not in d.split("/") and d not in self._held.originals:
                self._held.originals[d] = value
                self._held.pending.add(d)

    def _kept(self, before: Mapping[str, int]) -> None:
        if self._keep is not None and self._held.originals != before:
            self._keep(dict(self._held.originals))

    def available(self) -> bool:
        """Whether this kernel schedules RT by group (the hierarchy's root has the file)."""
        return self._files.read(f"{CPU_ROOT}/{RUNTIME}") is not None

    def _value(self, d: str, name: str = RUNTIME) -> int | None:
        text = (self._files.read(f"{d}/{name}") or "").strip()
        return int(text) if text.lstrip("-").isdigit() else None

    def ensure(self, container_id: str, cgroup_dir: str) -> str | None:
        """Gives `cgroup_dir` (the container's, under CPU_ROOT) and its parents an RT
        budget; None when it has one, else why not (one line)."""
        if not cgroup_dir.startswith(CPU_ROOT + "/"):
            return f"{cgroup_dir} is not in the cpu hierarchy at {self._files.show(CPU_ROOT)}"
        parts = cgroup_dir[len(CPU_ROOT) + 1:].split("/")
        chain = tuple(f"{CPU_ROOT}/{'/'.join(parts[: i + 1])}" for i in range(len(parts)))
        self._held.chains[container_id] = chain
        period = self._value(chain[-1], PERIOD) or 1_000_000
        own = self._value(chain[-1])
        if own is None:
            return f"{self._files.show(chain[-1])} has no {RUNTIME}"
        want = max(own, int(period * FRACTION))
        others = {d: self._others(d, chain[i + 1]) for i, d in enumerate(chain[:-1])}
        # Within what the root allows: the chain's top may take what its siblings leave.
        room = (self._value(CPU_ROOT) or 0) - self._others(CPU_ROOT, chain[0])
        needed = self._needed(chain, others, want)
        excess = needed[chain[0]] - room
        if excess > 0 and want - excess > own:
            want -= excess  # less than FRACTION, but a budget
            needed = self._needed(chain, others, want)
        before = dict(self._held.originals)
        try:
            return self._write_chain(chain, needed)
        finally:
            self._kept(before)

    def _write_chain(self, chain: tuple[str, ...], needed: Mapping[str, int]) -> str | None:
        for d in chain:  # parents first: a child never holds more than its parent
            have = self._value(d) or 0
            if have >= needed[d]:
                continue
            try:
                self._files.write(f"{d}/{RUNTIME}", str(needed[d]))
            except OSError as e:
                return (f"the kernel refuses {RUNTIME} {needed[d]} in {self._files.show(d)} "
                        f"({e.strerror or e}): SCHED_FIFO/SCHED_RR need an RT budget in every cgroup up to the root")
            self._held.originals.setdefault(d, have)
            if self._note is not None:
                self._note(f"rt budget: wrote '{needed[d]}' to {self._files.show(f'{d}/{RUNTIME}')}")
        return None

    def _others(self, level: str, child: str) -> int:
        """What the children of `level` but `child` hold."""
        return sum(self._value(f"{level}/{n}") or 0 for n in self._files.listdir(level)
                   if f"{level}/{n}" != child and self._files.exists(f"{level}/{n}/{RUNTIME}"))

    def _needed(self, chain: tuple[str, ...], others: dict[str, int], want: int) -> dict[str, int]:
        """What each level must hold, bottom-up: its other children's and the next one's."""
        needed = {chain[-1]: want}
        for i in range(len(chain) - 2, -1, -1):
            needed[chain[i]] = max(self._value(chain[i]) or 0, others[chain[i]] + needed[chain[i + 1]])
        return needed

    def release(self, container_id: str) -> None:
        """The container is gone (or going): what only it needed goes back, children
        first. A level the kernel will not lower yet (the container's threads still
        there, a child's budget still in place) is tried again by `retry`."""
        chain = self._held.chains.pop(container_id, None)
        if chain is not None:
            self._held.pending.update(d for d in chain if d in self._held.originals)
        self.retry()

    def retry(self, last: bool = False) -> None:
        """Puts back what no container needs any more, deepest first; `last` (shutdown):
        what the kernel still refuses is said."""
        before = dict(self._held.originals)
        try:
            self._retry(last)
        finally:
            self._kept(before)

    def _retry(self, last: bool) -> None:
        kept = {d for c in self._held.chains.values() for d in c}
        for d in sorted(self._held.pending, key=lambda d: (-d.count("/"), d)):
            if d in kept:
                continue
            original = self._held.originals[d]
            if not self._files.exists(f"{d}/{RUNTIME}"):  # removed with its container
                self._held.pending.discard(d)
                self._held.originals.pop(d, None)
                continue
            try:
                self._files.write(f"{d}/{RUNTIME}", str(original))
            except OSError as e:
                (log.warning if last else log.debug)("rt budget: cannot put %s back to %d in %s: %s", RUNTIME,
                                                     original, self._files.show(d), e.strerror or e)
                continue
            self._held.pending.discard(d)
            self._held.originals.pop(d, None)
            if self._note is not None:
                self._note(f"rt budget: wrote '{original}' back to {self._files.show(f'{d}/{RUNTIME}')}")

    def close(self) -> None:
        """Shutdown: everything written goes back (a level the kernel still needs, for a
        running RT thread, is said to stay)."""
        self._held.chains.clear()
        self._held.pending.update(self._held.originals)
        self.retry(last=True)

    def held(self) -> dict[str, int]:
        """The directories written and what they held before (for tests and /state)."""
        return dict(self._held.originals)
