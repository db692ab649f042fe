"""Dedicated balloons: Guaranteed containers that kubelet admitted get CPUs of their own.

A balloon type with PreferNewBalloons gives each pod a balloon of its own while CPUs
allow; the references call this preferring exclusive CPUs. A Guaranteed container with
whole CPUs in such a type is *dedicated*: kubelet admitted it because the requests of all
containers fit the allocatable CPUs, so it must run on CPUs no other pod's container uses.
Two things of ours can stand in the way, and both give way to it:

* other balloons round their requests up (a BestEffort container's balloon holds a whole
  CPU for 0m, a 500m one a whole CPU): when a dedicated container lacks CPUs, balloons that
  are not dedicated give back what they hold beyond their requests (their MinCPUs stay),
  and, if that is not enough, the fraction their requests do not fill; a balloon left
  with no CPU runs its containers on the reserved CPUs until CPUs free up (as kubelet's
  shared pool keeps the reserved CPUs);
* when even that cannot make room (the requests do not fit), the container is placed
  best-effort in the default balloon, not in another pod's dedicated balloon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.balloons.assign import Balloon
from cri_resmgr.policy.balloons.types import RESERVED, BalloonType

if TYPE_CHECKING:
    from cri_resmgr.policy.balloons.book import Book

__all__ = ["dedicated", "dedicated_balloon", "reclaim"]


def dedicated(t: BalloonType, w: Workload) -> bool:
    """A Guaranteed container with whole CPUs, in a type that gives pods their own balloons."""
    return (t.prefer_new and t.name != RESERVED and not t.hide_hyperthreads and w.qos is QoS.GUARANTEED
            and w.cpu_request >= 1000 and w.cpu_request % 1000 == 0)


def dedicated_balloon(b: Balloon) -> bool:
    return bool(b.members) and all(dedicated(b.type, m) for m in b.members.values())


def reclaim(book: Book, units: int, keep: Balloon | None = None) -> tuple[set[Balloon], list[str]]:
    """Free up to `units` CPUs from balloons that are not dedicated (nor reserved, nor
    counted in cores): first what they hold beyond their requests, then the fraction their
    requests leave unused. The balloons changed, and a note for each."""
    changed: set[Balloon] = set()
    notes: list[str] = []
    if units <= 0:
        return changed, notes
    # (excess milli-CPU, balloon): the most held beyond the requests first
    candidates = []
    for b in book.balloons.values():
        if b is keep or book.is_fixed(b) or b.type.hide_hyperthreads or dedicated_balloon(b) or not b.cpus:
            continue
        floor = max(b.type.min_cpus, b.requested // 1000)
        if len(b.cpus) > floor:
            candidates.append((len(b.cpus) * 1000 - b.requested, b, floor))
    candidates.sort(key=lambda c: (-c[0], c[1].type.order, c[1].index))
    left = units
    for _, b, floor in candidates:
        give = min(len(b.cpus) - floor, left)
        before = b.cpus
        book.shrink(b, give)
        changed.add(b)
        left -= give
        where = f"now CPUs {b.cpus}" if b.cpus else "its containers run on the reserved CPUs until CPUs free up"
        notes.append(f"moved CPUs {before - b.cpus} of {b.name} ({b.requested}m requested) to a dedicated "
                     f"balloon; {where}")
        if left == 0:
            break
    return changed, notes
