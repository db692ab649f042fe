"""Rebuilding the balloons after a restart or a reconfiguration: balloons' rules for
policy/restore.py.

Saved assignments name each container's balloon and that balloon's CPUs. A
balloon is rebuilt on its saved CPUs when its type still exists, its members
still belong to that type, and the CPUs are still free for it (balloons
disjoint, within the CPUs balloons are made of, whole cores under
HideHyperthreads, its index within MaxBalloons). Containers of the reserved type
join the reserved balloon, saved or not. Then (`settle`), in this order so that
CPUs given back are there for those that need them: balloons above their size
shrink, the types' MinBalloons are made up (as they always exist while the
policy runs), balloons below their size grow; then every other container is
placed as new. With the configuration unchanged nothing moves; with a changed
one the balloons re-size and re-place live.

What a live restore refuses (lost, unmet): a container placed within its
balloon's bounds before and not now (its balloon short, or no balloon of its
type could hold it), and MinBalloons no longer met.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cri_resmgr.bounded import short
from cri_resmgr.policy.api import Assignment, Workload
from cri_resmgr.policy.balloons.assign import Balloon, type_for
from cri_resmgr.policy.balloons.types import DEFAULT, RESERVED, BalloonType
from cri_resmgr.policy.restore import Rules
from cri_resmgr.topology.cpuallocator import AllocationError
from cri_resmgr.topology.cpuset import CPUSet

if TYPE_CHECKING:
    from cri_resmgr.policy.balloons.book import Book
    from cri_resmgr.policy.balloons.policy import BalloonsPolicy


__all__ = ["BalloonsRules", "saved_balloon"]


def saved_balloon(a: Assignment | None, parsed: dict[str, CPUSet] | None = None) -> tuple[str, int, CPUSet] | None:
    """(type, index, CPUs) from a saved assignment; None when it is not one of ours.
    `parsed`: CPU lists already parsed (a balloon's members all carry its list)."""
    if a is None:
        return None
    d = a.details
    name, type_name, cpus = d.get("balloon"), d.get("type"), d.get("cpus")
    if not (isinstance(name, str) and isinstance(type_name, str) and isinstance(cpus, str)):
        return None
    prefix = f"{type_name}["
    if not (name.startswith(prefix) and name.endswith("]") and name[len(prefix):-1].isdigit()):
        return None
    got = parsed.get(cpus) if parsed is not None else None
    if got is None:
        try:
            got = CPUSet.parse(cpus)
        except ValueError:
            return None
        if parsed is not None:
            parsed[cpus] = got
    return type_name, int(name[len(prefix):-1]), got


class BalloonsRules(Rules):
    def __init__(self, policy: BalloonsPolicy) -> None:
        self.name = policy.name
        self._policy = policy
        self._types: dict[str, BalloonType] = {}  # each container's type, worked out once
        self._saved: dict[str, tuple[str, int, CPUSet] | None] = {}  # and its saved balloon, parsed once
        self._parsed: dict[str, CPUSet] = {}  # the saved balloons' CPU lists
        self._rebuilt: dict[str, CPUSet] = {}  # balloon name -> its saved CPUs

    @property
    def _book(self) -> Book:
        return self._policy.book

    def _type(self, w: Workload) -> BalloonType:
        t = self._types.get(w.key)
        if t is None:
            book = self._book
            t = self._types[w.key] = type_for(book.config, w, bool(book.reserved))[0]
        return t

    def _saved_balloon(self, w: Workload, a: Assignment | None) -> tuple[str, int, CPUSet] | None:
        if w.key not in self._saved:
            self._saved[w.key] = saved_balloon(a, self._parsed)
        return self._saved[w.key]

    def _kept_type(self, w: Workload, a: Assignment | None) -> BalloonType:
        """Its type; default where it was placed best-effort when its type had no room (it
        stays there), unless it belongs on the reserved CPUs."""
        t = self._type(w)
        saved = self._saved_balloon(w, a)
        if (t.name not in (RESERVED, DEFAULT) and saved is not None and saved[0] == DEFAULT
                and a is not None and a.details.get("fallback")):
            return self._book.config.default
        return t

    def reset(self) -> Callable[[], None]:
        return self._policy.start_afresh()

    def validate(self, workload: Workload, saved: Assignment | None) -> str | None:
        t = self._kept_type(workload, saved)
        if t.name == RESERVED:
            return None  # the reserved balloon, saved or not
        balloon = self._saved_balloon(workload, saved)
        if balloon is None:
            return "nothing saved" if saved is None else "not a balloon"
        type_name, index, cpus = balloon
        if type_name != t.name:
            return f"it belongs to {t.name} now, was in {short(type_name, 40)}"
        name = f"{t.name}[{index}]"
        rebuilt = self._rebuilt.get(name)
        if rebuilt is None:
            return self._unusable(t, index, cpus)
        if rebuilt != cpus:
            return f"the other containers of {name} were saved with its CPUs {rebuilt}, not {cpus}"
        return None

    def _unusable(self, t: BalloonType, index: int, cpus: CPUSet) -> str | None:
        book = self._book
        if t.max_balloons is not None and index >= t.max_balloons:
            return f"{t.name}[{index}] is beyond MaxBalloons {t.max_balloons}"
        if not cpus.issubset(book.free):  # (empty: a balloon that got no CPU, as saved)
            return f"CPUs {cpus - book.free} of {t.name}[{index}] are not free for balloons"
        if t.hide_hyperthreads and book.near.whole_cores(cpus) != cpus:
            return f"CPUs {cpus} of {t.name}[{index}] are not whole cores (HideHyperthreads)"
        return None  # a balloon above a lowered MaxCPUs is kept and shrunk

    def keep(self, workload: Workload, saved: Assignment | None) -> None:
        book = self._book
        t = self._kept_type(workload, saved)
        if t.name == RESERVED:
            _join(book.by_type[RESERVED][0], workload, book)
            return
        balloon = self._saved_balloon(workload, saved)
        assert balloon is not None and saved is not None  # validate() refuses the rest
        _, index, cpus = balloon
        name = f"{t.name}[{index}]"
        if name not in self._rebuilt:
            book.balloons_add(Balloon(t, index, cpus=cpus))
            self._rebuilt[name] = cpus
        _join(book.balloons[name], workload, book)
        if saved.details.get("fallback"):
            book.fallback.add(workload.key)

    def settle(self) -> list[str]:
        book = self._book
        # Shrink first, so that CPUs given back are there for the balloons that must grow.
        warnings: list[str] = []
        for b in list(book.balloons.values()):
            if not book.is_fixed(b) and book.size(b) > book.target(b):
                book.resize(b)
        for t in book.config.types:
            while t.name != RESERVED and len(book.by_type[t.name]) < t.min_balloons:
                try:
                    book.new_balloon(t, t.min_cpus)
                except AllocationError as e:
                    warnings.append(f"balloons: MinBalloons of {t.name} not met: {e}")
                    break
        for b in list(book.balloons.values()):
            book.resize(b)
            if book.short(b):
                warnings.append(_short(book.size(b), b))
        book.refresh(set(book.balloons.values()), book.free)
        return warnings

    def lost(self, workload: Workload, saved: Assignment) -> str | None:
        if saved.details.get("short"):
            return None  # it was short of its request already
        book = self._book
        b = book.member.get(workload.key)
        if b is None:
            return None
        t = self._type(workload)
        if b.type.name != t.name and saved.details.get("type") != DEFAULT:
            # (in default before: it may have been placed there best-effort already)
            return f"{workload} ({workload.short_key}) belongs to {t.name} but no {t.name} balloon can hold it"
        if book.short(b):
            return (f"{workload} ({workload.short_key}) in {b.name}: {book.size(b)} of the {book.needed(b, 0, 0)} "
                    f"{'cores' if t.hide_hyperthreads else 'CPUs'} its containers need")
        return None

    def unmet(self) -> list[str]:
        book = self._book
        return [f"{t.name}: MinBalloons {t.min_balloons} cannot be met" for t in book.config.types
                if t.name != RESERVED and len(book.by_type[t.name]) < t.min_balloons]


def _join(b: Balloon, w: Workload, book: Book) -> None:
    b.join(w)
    book.member[w.key] = b


def _short(size: int, b: Balloon) -> str:
    keys = ", ".join(f"({k})" for k in b.members)
    return (f"balloons: {b.name} has {size} of the {b.requested}m its containers {keys} request: "
            "not enough free CPUs, or above its MaxCPUs")
