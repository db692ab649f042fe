"""The allocator's preferences: a short ordered list of named criteria.

A candidate placement is a `Pick` (core number -> how many of its free threads
to take). Each criterion maps (free state, pick) to a key where smaller is
better; candidates are compared criterion by criterion, in CRITERIA order, so
an earlier criterion always outweighs every later one. Each is a plain
function so that a test can check it on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cri_resmgr.topology.cpushape import Shape
from cri_resmgr.topology.model import Level

__all__ = ["Pick", "FreeState", "Criterion", "CRITERIA", "score", "Ranked",
           "spans", "broken_cores", "cores_touched", "idle_groups_broken", "tightness", "lowest_ids"]

Pick = dict[int, int]  # core number -> threads taken from it


class FreeState:
    """The free CPUs of one allocation call (a bitmask of CPU ids), with the free
    threads per core and per group counted when first asked for: a request looks at
    a few groups' worth of cores, a big machine has thousands."""

    __slots__ = ("shape", "mask", "free", "_group_free")

    def __init__(self, shape: Shape, mask: int) -> None:
        self.shape = shape
        self.mask = mask
        self.free = _Counted(mask, shape.core_mask)  # core number -> free threads
        self._group_free: dict[Level, _Counted] = {}

    def group_free(self, level: Level) -> Mapping[int, int]:
        """Group number -> free threads in it."""
        counts = self._group_free.get(level)
        if counts is None:
            counts = self._group_free[level] = _Counted(self.mask, self.shape.group_mask[level])
        return counts

    def with_free(self, cores: tuple[int, ...] | range, idle: bool = False) -> list[int]:
        """Those of `cores` with free threads, each counted at once (not one lookup each);
        `idle`: the caller knows every thread of them is free."""
        free, size = self.free, self.shape.size
        if idle:
            free.update(zip(cores, map(size.__getitem__, cores), strict=True))
            return list(cores)
        mask, masks = self.mask, self.shape.core_mask
        counts = [(mask & masks[c]).bit_count() for c in cores]
        free.update(zip(cores, counts, strict=True))
        return [c for c, k in zip(cores, counts, strict=True) if k]

    def is_whole(self, core: int) -> bool:
        return self.free[core] == self.shape.size[core]


class _Counted(dict[int, int]):
    """Index -> the free CPUs among masks[index], counted on first use."""

    __slots__ = ("_free", "_masks")

    def __init__(self, free: int, masks: tuple[int, ...]) -> None:
        super().__init__()
        self._free, self._masks = free, masks

    def __missing__(self, index: int) -> int:
        count = self[index] = (self._free & self._masks[index]).bit_count()
        return count


Criterion = Callable[[FreeState, Pick], object]


def spans(level: Level) -> Criterion:
    """How many groups of `level` the pick touches: fewer keeps a request together."""

    def count(state: FreeState, pick: Pick) -> int:
        of_core = state.shape.group_of.get(level)
        if of_core is None:
            return 0
        return len({of_core[c] for c in pick})

    count.__name__ = f"fewest_{level}s"
    return count


def broken_cores(state: FreeState, pick: Pick) -> int:
    """Untouched cores the pick leaves half used: never more than the request forces."""
    return sum(1 for c, n in pick.items() if n < state.free[c] and state.is_whole(c))


def cores_touched(state: FreeState, pick: Pick) -> int:
    """Cores used: fewer means whole cores before threads scattered over used ones."""
    return len(pick)


def idle_groups_broken(state: FreeState, pick: Pick) -> tuple[int, ...]:
    """Idle groups (widest level first) the pick starts using: keep big free blocks free."""
    shape = state.shape
    out = []
    for level, of_core in shape.group_of.items():
        sizes, free = shape.group_size[level], state.group_free(level)
        out.append(len({g for g in (of_core[c] for c in pick) if free[g] == sizes[g]}))
    return tuple(out)


def tightness(state: FreeState, pick: Pick) -> tuple[int, ...]:
    """Free CPUs in the groups used (widest level first): pack into the busiest ones
    (kubelet's "packed" order), leaving the emptier groups for later requests."""
    shape = state.shape
    out = []
    for level, of_core in shape.group_of.items():
        free = state.group_free(level)
        out.append(sum(free[g] for g in {of_core[c] for c in pick}))
    out.append(sum(state.free[c] for c in pick))
    return tuple(out)


def lowest_ids(state: FreeState, pick: Pick) -> tuple[int, ...]:
    """Last resort, for determinism: the lowest core numbers."""
    return tuple(sorted(pick))


# Containment first (the rule: one node, then die, L3, package), then
# the cores (no needless split, whole cores first), then the small groups,
# then what the pick leaves behind.
CRITERIA: tuple[Criterion, ...] = (
    spans("node"),
    spans("die"),
    spans("l3"),
    spans("package"),
    broken_cores,
    cores_touched,
    spans("cluster"),
    spans("l2"),
    idle_groups_broken,
    tightness,
    lowest_ids,
)


def score(state: FreeState, pick: Pick, criteria: tuple[Criterion, ...] = CRITERIA) -> tuple[object, ...]:
    """The pick's keys under every criterion, in order; compare with <."""
    return tuple(c(state, pick) for c in criteria)


class Ranked:
    """A pick with its criterion keys computed only as far as a comparison needs.

    Most candidates differ in an early criterion, so the costly later ones
    (idle groups, tightness) are rarely computed.
    """

    __slots__ = ("pick", "_state", "_criteria", "_keys")

    def __init__(self, state: FreeState, pick: Pick, criteria: tuple[Criterion, ...] = CRITERIA) -> None:
        self.pick = pick
        self._state = state
        self._criteria = criteria
        self._keys: list[object] = []

    def key(self, i: int) -> object:
        keys = self._keys
        while len(keys) <= i:
            keys.append(self._criteria[len(keys)](self._state, self.pick))
        return keys[i]

    def __lt__(self, other: Ranked) -> bool:
        for i in range(len(self._criteria)):
            mine, theirs = self.key(i), other.key(i)
            if mine != theirs:
                return bool(mine < theirs)  # type: ignore[operator]
        return False
