"""What a pool policy's CPUs are used for, as plain data for metrics and the node export.

A snapshot: the policy's book is copied, never handed out. `usage()` may be
asked from the metrics server's thread while the event loop decides; each field
is read once, so a concurrent decision gives old or new values, never a mix
within one set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cri_resmgr.topology.cpuset import CPUSet


@dataclass(frozen=True)
class PoolUsage:
    name: str  # "shared", "reserved", "isolated"
    cpus: CPUSet  # the pool's CPUs, exclusive ones included (its capacity)
    exclusive: CPUSet  # of those, given to containers for their own use
    shared: CPUSet  # of those, what the pool's shared containers run on now
    # Optional, for policies with many pools (a pool tree, balloons): the pool's type
    # (a balloon type, a tree level), its parent pool, memory nodes, members and requests.
    kind: str = ""
    parent: str = ""
    mems: str = ""
    containers: tuple[str, ...] = ()  # container keys
    requested_milli: int = 0  # sum of its containers' CPU requests
    # Of `cpus`, the ones its containers never run on though the pool owns them: a
    # HideHyperthreads balloon's sibling threads (no one else gets them either).
    hidden: CPUSet = CPUSet()
    # How many CPUs the pool keeps whatever its containers request (a balloon type's MinCPUs):
    # held for it, so no one else's either.
    kept: int = 0


@dataclass(frozen=True)
class PolicyUsage:
    pools: tuple[PoolUsage, ...]
    exclusive_free: CPUSet  # CPUs a container could still get exclusively
    exclusive: dict[str, CPUSet] = field(default_factory=dict)  # container key -> its exclusive CPUs
    members: dict[str, int] = field(default_factory=dict)  # container pool name -> containers

    def pool_cpus(self) -> dict[str, CPUSet]:
        """Each pool's CPUs now, by name (`cri-resmgr status`): the shared pool's CPUs, the
        reserved and isolated pools whole, and every exclusive CPU in use, whatever its source.
        Pools with a kind (a tree level, a balloon type) give what their containers run on:
        a tree's pools overlap, and their capacity is in the pool table."""
        out = {p.name: (p.shared if p.name == "shared" or p.kind else p.cpus) for p in self.pools}
        out.setdefault("reserved", CPUSet())
        out["exclusive"] = CPUSet().union(*self.exclusive.values())
        return out
