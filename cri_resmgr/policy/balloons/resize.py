"""In-place resize in balloons: a container whose balloon can take its new size stays in
it, and the balloon inflates or deflates around the CPUs it has.

It stays when its balloon type is the same and it is not placed best-effort in another
type's balloon, and: it shrinks (its balloon can only need less; one already short of
CPUs gets no worse); or its balloon grows within MaxCPUs and the free CPUs; or it is a
dedicated container in a balloon of dedicated containers (isolation.py), which takes the
slack of other balloons as on a create, and grows by whole cores as a create would give
them (sizing.py inflate_whole) unless that splits more cores than a new balloon would
get from the free whole cores, in which case it moves. Staying costs what a create costs: the balloon
is resized once and its members (and those of balloons whose lent idle CPUs changed)
are recomputed once.

Otherwise, and when it becomes dedicated in a balloon it shares, it is released and
placed again (policy/resize.py by_replacing): it moves to another balloon of its type.
When no balloon can hold the new size, or a dedicated balloon cannot take enough CPUs
from the others, the resize is refused and every balloon is put back as it was: the
policy swaps back a copy of its book taken before (BalloonsPolicy.checkpoint), empty
balloons, names and lent CPUs included.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from cri_resmgr.policy.api import Decision, ResizeError, Workload
from cri_resmgr.policy.balloons.assign import Balloon, type_for
from cri_resmgr.policy.balloons.isolation import dedicated, reclaim
from cri_resmgr.policy.resize import by_replacing

if TYPE_CHECKING:
    from cri_resmgr.policy.balloons.book import Book
    from cri_resmgr.policy.balloons.policy import BalloonsPolicy

__all__ = ["resize"]


class _Way(Enum):
    STAY = "stay"  # its balloon takes the new size from the free CPUs (or gives CPUs back)
    MAKE_ROOM = "make room"  # a dedicated balloon that takes other balloons' slack
    MOVE = "move"  # released and placed again


def resize(policy: BalloonsPolicy, w: Workload) -> Decision:
    """policy.api.Resizable for balloons (see the module's doc)."""
    book = policy.book
    b = book.member.get(w.key)
    way = _MOVE if b is None else _way(book, b, w)
    if way is _MOVE:
        return by_replacing(policy, w, policy.checkpoint(), policy.place)
    assert b is not None
    return _in_place(policy, b, w, way is _Way.MAKE_ROOM)


_MOVE = _Way.MOVE


def _way(book: Book, b: Balloon, w: Workload) -> _Way:
    old = b.members[w.key]
    t = b.type
    if w.key in book.fallback or type_for(book.config, w, bool(book.reserved))[0] is not t:
        return _MOVE
    if book.is_fixed(b):
        return _Way.STAY  # the reserved balloon: the reserved CPUs whatever is asked
    if dedicated(t, w) and not dedicated(t, old) and len(b.members) > 1:
        return _MOVE  # whole CPUs now: a balloon of its own if one can be had (policy.py _choose)
    delta = w.cpu_request - old.cpu_request
    if delta <= 0:
        return _Way.STAY
    need = book.needed(b, delta, 0)
    if t.max_cpus is not None and need > t.max_cpus:
        return _MOVE
    own = dedicated(t, w) and all(dedicated(t, m) for k, m in b.members.items() if k != w.key)
    growth = need - book.size(b)
    if growth <= book.free_units(t):
        if own and not _whole_enough(book, b, growth):
            return _MOVE  # its CPUs are its own: whole cores elsewhere rather than split ones here
        return _Way.STAY
    return _Way.MAKE_ROOM if own else _MOVE


def _whole_enough(book: Book, b: Balloon, n: int) -> bool:
    """Whether a dedicated balloon grown by `n` CPUs where it is (Book.grow) splits no more
    cores than its size forces, or no more than a new balloon of that size would (the free
    whole cores cannot hold it either)."""
    near = book.near
    if n <= 0 or b.type.spread_cores or book.kind_preference(b.type) is not None:
        return True  # (those grow by inflate, as they were made)
    threads = near.topology.threads_per_core()
    size = len(b.cpus) + n
    swap = near.inflate_whole(book.free, b.cpus, n)
    if swap is not None:
        new, given = swap
        after = (b.cpus - given) | new
        if len(after - near.whole_cores(after)) <= size % threads:
            return True
    whole = near.whole_cores(book.free - near.beside_reserved)
    return len(whole) < size - size % threads


def _in_place(policy: BalloonsPolicy, b: Balloon, w: Workload, make_room: bool) -> Decision:
    book = policy.book
    # What a refusal puts back (only a dedicated balloon that takes others' CPUs may be refused).
    undo = policy.checkpoint() if make_room else None
    old_free = book.free
    b.resize(w)
    changed = {b}
    lacking = book.resize(b)
    if lacking and make_room:
        moved, _ = reclaim(book, lacking, b)
        changed |= moved
        lacking = book.resize(b)
        if lacking:
            assert undo is not None
            undo()
            unit = "cores" if b.type.hide_hyperthreads else "CPUs"
            raise ResizeError(f"balloons: {w} ({w.short_key}) with its {w.cpu_request}m CPU request: {b.name} lacks "
                              f"{lacking} {unit} that are neither free nor held by other balloons beyond "
                              "their requests")
    book.regrow_short(changed)  # CPUs it gave back go to balloons short of them
    others = book.refresh(changed, old_free, w.key)
    return Decision(resources=b.resources, others=others)
