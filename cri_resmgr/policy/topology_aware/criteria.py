"""Which of the pools that can take a container is best: a short ordered list of named
criteria, each a small function of one candidate, larger is better. The first criterion
that tells two candidates apart decides; the last one (the pool's tree position) always
does, so the choice is stable.

Memory that does not fit comes after tightness on purpose: a container's CPUs stay in
the tightest pool and its memory is widened up the tree (memory.py), so the kernel
still allocates from the local node first.

Only pools with enough free CPU are candidates (the policy filters them): the criteria
rank, they do not check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cri_resmgr.policy.topology_aware.pooltree import Pool

__all__ = ["Candidate", "Criterion", "CRITERIA", "rank", "best", "explain"]


@dataclass(slots=True)
class Candidate:
    """A pool that can take the container, and what placing it there would leave (made
    for every pool at each decision: plain slots, not frozen, which costs twice as much)."""

    pool: Pool
    memory_fits: bool = True  # its memory request fits the pool's own free memory
    affinity: float = 0.0  # pool_scores() of affinity.py
    kinds: int = 0  # how many of the requested memory kinds the pool has
    free_milli: int = 0  # the pool's free shared milli-CPU after placement
    free_exclusive: int = 0  # CPUs still free for exclusive use in the pool after placement
    load: int = 0  # containers with a shared part in the pool's subtree now
    reserved: int = 0  # reserved CPUs in the pool
    isolated: bool = False  # its exclusive CPUs would be isolated ones (asked for only when preferred)


Criterion = tuple[str, Callable[[Candidate], float]]


def memory_fits(c: Candidate) -> float:
    """A pool that holds the memory request itself, over one that must widen."""
    return 1.0 if c.memory_fits else 0.0


def affinity(c: Candidate) -> float:
    """More affinity (less anti-affinity) to the containers already placed."""
    return c.affinity


def memory_kind(c: Candidate) -> float:
    """More of the requested memory kinds."""
    return float(c.kinds)


def isolated(c: Candidate) -> float:
    """Isolated CPUs, for a container that prefers them."""
    return 1.0 if c.isolated else 0.0


def tightest(c: Candidate) -> float:
    """The lowest pool in the tree: fewest CPUs and nodes to share."""
    return float(c.pool.depth)


def balance(c: Candidate) -> float:
    """The pool left with the most free capacity (shared, then exclusive CPUs)."""
    return c.free_milli + 1000.0 * c.free_exclusive


def load(c: Candidate) -> float:
    """When requests tie (BestEffort, 1m): the pool with the fewest containers."""
    return -float(c.load)


def unreserved(c: Candidate) -> float:
    """Then the pool with fewer reserved CPUs: kube-system runs on them."""
    return -float(c.reserved)


def position(c: Candidate) -> float:
    """Stable tie-break: the pool first in tree order."""
    return -float(c.pool.index)


CRITERIA: tuple[Criterion, ...] = (
    ("affinity", affinity),
    ("memory-kind", memory_kind),
    ("isolated", isolated),
    ("tightest", tightest),
    ("memory-fits", memory_fits),
    ("balance", balance),
    ("load", load),
    ("unreserved", unreserved),
    ("position", position),
)


def rank(candidates: Iterable[Candidate], criteria: Sequence[Criterion] = CRITERIA) -> list[Candidate]:
    """Best first."""
    fns = [fn for _, fn in criteria]
    return sorted(candidates, key=lambda c: tuple([fn(c) for fn in fns]), reverse=True)


def best(candidates: Iterable[Candidate], criteria: Sequence[Criterion] = CRITERIA) -> Candidate | None:
    ranked = rank(candidates, criteria)
    return ranked[0] if ranked else None


def explain(a: Candidate, b: Candidate, criteria: Sequence[Criterion] = CRITERIA) -> str | None:
    """The name of the criterion that puts `a` before `b`; None if b is as good or better."""
    for name, fn in criteria:
        x, y = fn(a), fn(b)
        if x != y:
            return name if x > y else None
    return None
