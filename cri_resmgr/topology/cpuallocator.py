"""Topology-aware CPU allocation: which N CPUs to take from a free set.

Kubelet's static CPU manager (takeByTopology) takes whole sockets, then whole
cores, then single threads. This allocator keeps that order and adds what it
lacks; every allocation holds these rules (tests/topology check each one
against a brute-force reference):

* only CPUs of the free set (the caller leaves out reserved and offline
  ones), exactly n of them, none twice;
* a request that fits in one NUMA node stays in one, then in one die, one L3
  group (an AMD CCX), one package; a request that needs several nodes takes
  the fewest, idle ones first;
* no more physical cores split than the request forces: whole free cores
  first, and a request smaller than a core first uses threads left over on
  cores already in use;
* a spill into another group takes whole cores there, not a stray thread;
* among equally good placements, the one that leaves the largest free blocks.

How: cpushape.py turns the Topology into core and group numbers (and their
CPUs as bitmasks) once, cpuplacer.py narrows a request group by group and
picks cores, cpucriteria.py holds the preferences as a short ordered list of
named criteria, and cpusymmetry.py says which idle groups are built alike, so
that one of them is tried for all. Free threads are counted (popcounts of
the free set's bitmask) only in the groups the walk looks at: on a 4096-CPU
machine a small request reads a few nodes' cores, not every CPU. The
allocator holds no allocation state: the caller owns the free set. Same
inputs give the same output.

Kubelet's options: `full_pcpus_only` (whole cores only, n a multiple of the
threads per core) and `distribute_across_numa` (a multi-node request split
evenly over its nodes) are keyword arguments; its
prefer-align-cpus-by-uncorecache is always on here (L3 groups are one of the
containment levels).
"""

from __future__ import annotations

from collections.abc import Iterable

from cri_resmgr.errors import CriResmgrError
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpucriteria import CRITERIA, Criterion, FreeState
from cri_resmgr.topology.cpuplacer import place
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.cpushape import Shape
from cri_resmgr.topology.model import Level

__all__ = ["AllocationError", "AlignmentError", "CPUAllocator", "allocate"]


class AllocationError(CriResmgrError):
    """Not enough free CPUs for a request."""

    def __init__(self, requested: int, available: int, free: CPUSet, reason: str = "") -> None:
        self.requested = requested
        self.available = available
        self.free = free
        super().__init__(
            reason or f"cannot allocate {requested} CPUs: only {available} free ({free or 'none'})"
        )


class AlignmentError(AllocationError):
    """full_pcpus_only: the request is not a whole number of cores."""


class CPUAllocator:
    """Picks CPUs for requests on one Topology; holds no allocation state.

    The caller owns the free set: `allocate` returns the chosen CPUs and the
    caller subtracts them; `release` returns the new free set.
    """

    def __init__(self, topology: Topology, *, full_pcpus_only: bool = False,
                 distribute_across_numa: bool = False,
                 criteria: tuple[Criterion, ...] = CRITERIA) -> None:
        self._topology = topology
        self._online = topology.online.as_mask()
        self._shape = Shape(topology)
        self._full_pcpus_only = full_pcpus_only
        self._spread: frozenset[Level] = frozenset({"node"}) if distribute_across_numa else frozenset()
        self._criteria = criteria

    @property
    def topology(self) -> Topology:
        return self._topology

    def allocate(self, free: CPUSet, n: int, prefer: CPUSet | None = None) -> CPUSet:
        """Choose `n` CPUs out of `free`.

        `prefer`: CPUs to use first (e.g. a NUMA node the caller wants).  If
        enough of them are free the whole allocation comes from them; if not,
        all free preferred CPUs are taken and the rest is chosen from the
        other free CPUs.

        Raises AllocationError when `free` has fewer than `n` CPUs (with
        full_pcpus_only: fewer in whole free cores, or AlignmentError when n
        is not a multiple of the threads per core), ValueError for a negative
        `n` or CPUs in `free` that are not online.
        """
        if type(n) is not int or n < 0:
            raise ValueError(f"number of CPUs to allocate must be a non-negative int, got {n!r}")
        # Bitmasks of CPU ids (CPUSet.as_mask): the set algebra of a 4096-CPU machine
        # is then a few words per 64 CPUs.
        free_set = _mask(free, "free")
        unknown = free_set & ~self._online
        if unknown:
            raise ValueError(f"free set contains CPUs that are not online: {CPUSet.of_mask(unknown)}")
        if self._full_pcpus_only:
            free_set = self._whole_cores(free_set, n)
        available = free_set.bit_count()
        if n > available:
            raise AllocationError(n, available, CPUSet.of_mask(free_set))
        if n == 0:
            return CPUSet()
        if prefer is not None:
            preferred = free_set & _mask(prefer, "prefer")
            count = preferred.bit_count()
            if count >= n:
                return CPUSet.of_mask(self._take(preferred, n))
            if preferred:
                rest = self._take(free_set & ~preferred, n - count)
                return CPUSet.of_mask(preferred | rest)
        return CPUSet.of_mask(self._take(free_set, n))

    def release(self, free: CPUSet, cpus: CPUSet) -> CPUSet:
        """Return the free set after giving `cpus` back; they must be online and not free."""
        back = _mask(cpus, "cpus")
        free_set = _mask(free, "free")
        unknown = back & ~self._online
        if unknown:
            raise ValueError(f"cannot release CPUs that are not online: {CPUSet.of_mask(unknown)}")
        twice = back & free_set
        if twice:
            raise ValueError(f"cannot release CPUs that are already free: {CPUSet.of_mask(twice)}")
        return CPUSet.of_mask(free_set | back)

    def _whole_cores(self, free: int, n: int) -> int:
        """full_pcpus_only: only CPUs of whole free cores count, and n must fill cores."""
        threads = self._shape.threads
        if n % threads:
            raise AlignmentError(n, free.bit_count(), CPUSet.of_mask(free),
                                 f"cannot allocate {n} CPUs with full_pcpus_only: not a multiple "
                                 f"of {threads} threads per core")
        whole = 0
        for core in self._shape.core_mask:
            if free & core == core:
                whole |= core
        return whole

    def _take(self, free: int, n: int) -> int:
        shape = self._shape
        pick = place(FreeState(shape, free), None, n, shape.levels, self._criteria, self._spread)
        taken = 0
        for core, k in pick.items():
            # Within a core: the lowest free thread ids.
            for cpu in shape.cores[core]:
                if k and free >> cpu & 1:
                    taken |= 1 << cpu
                    k -= 1
        return taken


def allocate(topology: Topology, free: CPUSet, n: int, prefer: CPUSet | None = None) -> CPUSet:
    """One-shot `CPUAllocator(topology).allocate(...)`; keep a CPUAllocator for repeated calls."""
    return CPUAllocator(topology).allocate(free, n, prefer)


def _mask(cpus: CPUSet | Iterable[int], what: str) -> int:
    if isinstance(cpus, CPUSet):
        return cpus.as_mask()
    try:
        return CPUSet(cpus).as_mask()
    except (TypeError, ValueError) as err:
        raise ValueError(f"bad {what} CPU set {cpus!r}: {err}") from None
