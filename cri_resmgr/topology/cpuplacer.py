"""Where the CPUs of one request go: narrowing by group, then picking cores.

`place` walks the containment levels (cpushape.CONTAINMENT) in order. At each
level the current cores are split by group:

* if some groups can hold the whole request, each of them is tried (the rest
  of the walk runs inside it) and the criteria (cpucriteria.CRITERIA) choose;
  of idle groups built alike, only the first (cpusymmetry.py: the others
  would score the same and lose on the lowest ids);
  at the soft levels (clusters, L2) not narrowing at all is one more candidate;
* if none can, the request spans the fewest groups possible: idle groups no
  bigger than what is still needed first, then the fullest, and the last one
  by best fit. Each chosen group gets whole cores first (so a spill never
  takes a stray thread when whole cores are free), then threads left over on
  used cores, then the rest.

At the end of the walk `pick_cores` chooses the cores inside one group.
"""

from __future__ import annotations

from collections.abc import Sequence

from cri_resmgr.topology.cpucriteria import CRITERIA, Criterion, FreeState, Pick, Ranked
from cri_resmgr.topology.cpushape import SOFT_LEVELS
from cri_resmgr.topology.cpusymmetry import mapped, untwinned
from cri_resmgr.topology.model import Level

__all__ = ["place", "pick_cores", "whole_core_amount", "even_split"]


def place(state: FreeState, cores: Sequence[int] | None, n: int, levels: Sequence[Level],
          criteria: tuple[Criterion, ...] = CRITERIA, spread: frozenset[Level] = frozenset()) -> Pick:
    """Choose n threads among `cores` (core numbers with free threads, ascending;
    None: every core of the machine with free threads).

    `spread`: levels at which a request that needs several groups is split
    evenly over them (kubelet's distribute-cpus-across-numa) instead of filling
    whole groups first.
    """
    if not levels:
        return pick_cores(state, _listed(state, cores), n)
    level, rest = levels[0], levels[1:]
    parts: dict[int, list[int]]
    if cores is None:
        # The whole machine: each group's free threads are a popcount; its cores are
        # listed only if the walk goes into it.
        group_free = state.group_free(level)
        part_free = {g: group_free[g] for g in state.shape.group_order[level] if group_free[g]}
        parts = _Members(state, level)
    else:
        of_core = state.shape.group_of[level]
        parts = {}
        for c in cores:
            parts.setdefault(of_core[c], []).append(c)
        part_free = {g: sum(map(state.free.__getitem__, members)) for g, members in parts.items()}
    if len(part_free) == 1:
        if cores is None:  # all the free threads are in this group: list only its cores
            cores = parts[next(iter(part_free))]
        return place(state, cores, n, rest, criteria, spread)
    free = state.free
    fitting = [g for g in part_free if part_free[g] >= n]
    if len(fitting) > 1 and criteria is CRITERIA:  # (CRITERIA score twins alike: cpusymmetry.py)
        fitting = untwinned(state, level, fitting, part_free)
    if fitting:
        best: Ranked | None = None
        if level in SOFT_LEVELS:
            # Keeping to one cluster/L2 is a preference, not a rule: also try
            # ignoring this level, and let the criteria weigh it against cores.
            best = Ranked(state, place(state, cores, n, rest, criteria, spread), criteria)
        shape = state.shape
        twins = shape.twins(level) if len(fitting) > 1 and criteria is CRITERIA else None
        tried: dict[int, tuple[int, Pick]] = {}  # twin class -> the idle group tried, its pick
        for g in fitting:
            twin = twins[g] if twins is not None and part_free[g] == shape.group_size[level][g] else None
            if twin is not None and twin.within and twin.cls in tried:
                source, pick = tried[twin.cls]
                pick = mapped(shape, level, source, g, pick)  # what trying it would give
            else:
                pick = place(state, parts[g], n, shape.splitting(level, g, tuple(rest)), criteria, spread)
                if twin is not None and twin.within:
                    tried[twin.cls] = (g, pick)
            candidate = Ranked(state, pick, criteria)
            if best is None or candidate < best:
                best = candidate
        assert best is not None
        return best.pick
    best = Ranked(state, _spill(state, level, parts, part_free, n, rest, criteria, spread), criteria)
    # Spanning several groups here: staying inside one group of a later level
    # (one package for a two-node request) may still be possible. Try each
    # such group as the whole domain and let the criteria choose.
    listed = _listed(state, cores) if any(later not in SOFT_LEVELS for later in rest) else ()
    for later in rest:
        if later in SOFT_LEVELS:
            continue
        by_group: dict[int, list[int]] = {}
        for c in listed:
            by_group.setdefault(state.shape.group_of[later][c], []).append(c)
        if len(by_group) == 1:
            continue
        for members in by_group.values():
            if sum(free[c] for c in members) >= n:
                candidate = Ranked(state, place(state, members, n, levels, criteria, spread), criteria)
                if candidate < best:
                    best = candidate
    return best.pick


class _Members(dict[int, list[int]]):
    """Group number -> its cores with free threads, listed when first asked for."""

    __slots__ = ("_state", "_level")

    def __init__(self, state: FreeState, level: Level) -> None:
        super().__init__()
        self._state, self._level = state, level

    def __missing__(self, group: int) -> list[int]:
        state, level = self._state, self._level
        idle = state.group_free(level)[group] == state.shape.group_size[level][group]
        cores = self[group] = state.with_free(state.shape.members[level][group], idle)
        return cores


def _listed(state: FreeState, cores: Sequence[int] | None) -> Sequence[int]:
    if cores is not None:
        return cores
    return state.with_free(range(len(state.shape.cores)))


def _spill(state: FreeState, level: Level, parts: dict[int, list[int]], part_free: dict[int, int],
           n: int, rest: Sequence[Level], criteria: tuple[Criterion, ...], spread: frozenset[Level]) -> Pick:
    """n threads over the fewest groups of `level`, whole cores first in each."""
    chosen = _fewest_groups(state, level, parts, part_free, n)
    amounts = even_split(state, [parts[g] for g in chosen], n) if level in spread else None
    if amounts is None:
        amounts = _whole_cores_first(state, [parts[g] for g in chosen], n)
    spilled: Pick = {}
    for g, amount in zip(chosen, amounts, strict=True):
        if amount:
            spilled.update(place(state, parts[g], amount, rest, criteria, spread))
    return spilled


def _fewest_groups(state: FreeState, level: Level, parts: dict[int, list[int]],
                   part_free: dict[int, int], n: int) -> list[int]:
    """The groups a request too big for one group takes: the fewest possible,
    idle ones first, then the fullest, staying in few packages; the last by best fit."""
    shape = state.shape
    sizes, packages = shape.group_size[level], shape.group_packages[level]
    remaining = sorted(part_free, key=lambda g: (-part_free[g], g))
    need = n
    chosen: list[int] = []
    in_packages: set[int] = set()
    # The fewest groups that can hold n: the fullest ones, counted.
    total, k = 0, 0
    for g in remaining:
        total += part_free[g]
        k += 1
        if total >= n:
            break
    while need > 0:
        left = k - len(chosen)
        fits = [g for g in remaining if part_free[g] >= need]
        if fits:
            last = min(fits, key=lambda g: (len(packages[g] - in_packages), part_free[g], g))
            chosen.append(last)
            return chosen

        # Taking g must leave the rest reachable with the groups still allowed.
        feasible = [g for g in remaining
                    if need - part_free[g] <= sum([part_free[o] for o in remaining if o != g][: left - 1])]
        g = min(feasible,
                key=lambda g: (part_free[g] != sizes[g], len(packages[g] - in_packages), -part_free[g], g))
        chosen.append(g)
        remaining.remove(g)
        in_packages |= packages[g]
        need -= part_free[g]
    return chosen


def whole_core_amount(state: FreeState, cores: Sequence[int], limit: int) -> int:
    """Threads the whole free cores among `cores` give, largest first, without passing `limit`."""
    got = 0
    for size in sorted((state.free[c] for c in cores if state.is_whole(c)), reverse=True):
        if got + size <= limit:
            got += size
    return got


def _whole_cores_first(state: FreeState, groups: list[list[int]], n: int) -> list[int]:
    """How many threads each chosen group gives: whole cores everywhere first,
    then threads left over on used cores, then whatever is free, in group order."""
    free = state.free
    amounts = []
    need = n
    for cores in groups:
        got = whole_core_amount(state, cores, need)
        amounts.append(got)
        need -= got
    for i, cores in enumerate(groups):
        if need == 0:
            break
        leftover = sum(free[c] for c in cores if not state.is_whole(c))
        extra = min(leftover, need)
        amounts[i] += extra
        need -= extra
    for i, cores in enumerate(groups):
        if need == 0:
            break
        extra = min(sum(free[c] for c in cores) - amounts[i], need)
        amounts[i] += extra
        need -= extra
    return amounts


def even_split(state: FreeState, groups: list[list[int]], n: int) -> list[int] | None:
    """n spread evenly over the groups in whole-core chunks; None if some group is too small."""
    chunk = state.shape.threads
    k = len(groups)
    chunks, tail = divmod(n, chunk)
    amounts = [(chunks // k) * chunk] * k
    for i in range(chunks % k):
        amounts[i] += chunk
    if tail:
        amounts[min(range(k), key=lambda i: amounts[i])] += tail
    for cores, amount in zip(groups, amounts, strict=True):
        if amount > sum(state.free[c] for c in cores):
            return None
    return amounts


def pick_cores(state: FreeState, cores: Sequence[int], n: int) -> Pick:
    """n threads from `cores`, splitting no more cores than n forces.

    Whole free cores first (largest first: a P-core before two E-cores);
    then one used core that holds the rest (the tightest); else the threads
    left over on used cores, fewest first; only then break an untouched core,
    the smallest that holds the rest.
    """
    free, size = state.free, state.shape.size
    pick: Pick = {}
    need = n
    # (reverse keeps the order of equals, as the key -free would: a stable sort)
    whole = sorted([c for c in cores if free[c] == size[c]], key=free.__getitem__, reverse=True)
    unused = []
    for c in whole:
        if free[c] <= need:
            pick[c] = free[c]
            need -= free[c]
            if need == 0:
                return pick  # (the rest of the whole cores would only be left unused)
        else:
            unused.append(c)
    if need == 0:
        return pick
    partial = [c for c in cores if free[c] != size[c]]
    holds = [c for c in partial if free[c] >= need]
    if holds:
        pick[min(holds, key=free.__getitem__)] = need
        return pick
    if sum(free[c] for c in partial) < need:
        # A core must be broken anyway: one that holds the whole rest touches
        # fewer cores than leftovers plus a broken core.
        holding = [c for c in unused if free[c] >= need]
        if holding:
            pick[min(holding, key=free.__getitem__)] = need
            return pick
    for c in sorted(partial, key=free.__getitem__):
        take = min(free[c], need)
        pick[c] = take
        need -= take
        if need == 0:
            return pick
    while need > 0:
        holding = [c for c in unused if free[c] >= need]
        c = min(holding, key=free.__getitem__) if holding else max(unused, key=free.__getitem__)
        unused.remove(c)
        pick[c] = min(free[c], need)
        need -= pick[c]
    return pick
