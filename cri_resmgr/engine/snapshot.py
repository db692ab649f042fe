"""What the relay decided, as one immutable snapshot (`Controller.state()`).

Taken on the event loop that owns the cache and the policy, so it is consistent:
the HTTP thread that serves `/state` only reads the frozen result. Nothing here
does I/O; the topology is summarised only if the engine already discovered it
(the none policy never does).

`to_document()` is the JSON of `/state` and of `cri-resmgr status -o json`; its
`version` changes when a field changes meaning or goes away.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cri_resmgr.config import Config
from cri_resmgr.engine.cache import Cache
from cri_resmgr.engine.cpuclasses import CpuClassStats
from cri_resmgr.policy.api import Policy
from cri_resmgr.policy.usage import PoolUsage
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.topology.model import UNKNOWN

FORMAT = "cri-resmgr-state"
VERSION = 1


@dataclass(frozen=True)
class ContainerState:
    id: str  # the runtime's id; "" while being created
    namespace: str
    pod: str
    name: str
    qos: str
    state: str  # creating, created, running, exited
    cpu_request: int  # milli-CPU
    cpu_limit: int | None
    memory_request: int  # bytes
    memory_limit: int | None
    pool: str | None  # None: the policy does not place it (released, or unknown to it)
    exclusive: CPUSet
    shared: CPUSet  # the rest of its cpuset: from its pool (shared, reserved)
    mems: str | None
    blockio_class: str | None = None
    rdt_class: str | None = None
    sched_class: str | None = None  # its scheduling class (docs/classes.md)
    managed: bool = True  # False: seen running under the none policy, which decides nothing
    # What the kernel enforces when a parent cgroup narrows the container's cpuset (the
    # reconcile reads it: realcpuset.py), and that cgroup; None: not so, or not known.
    effective_cpus: CPUSet | None = None
    narrowed_by: str | None = None
    # Exclusive CPUs the policy gives it when it can (its exclusive_wanted); holding fewer
    # is a request not met (the policy's warning said so when it decided).
    exclusive_wanted: int = 0

    @property
    def unmet(self) -> bool:
        return self.pool is not None and len(self.exclusive) < self.exclusive_wanted

    def to_document(self) -> dict[str, Any]:
        return {"id": self.id, "namespace": self.namespace, "pod": self.pod, "name": self.name,
                "qos": self.qos, "state": self.state,
                "requests": {"cpu_milli": self.cpu_request, "memory_bytes": self.memory_request},
                "limits": {"cpu_milli": self.cpu_limit, "memory_bytes": self.memory_limit},
                "pool": self.pool, "exclusive_cpus": str(self.exclusive), "shared_cpus": str(self.shared),
                "cpus": str(self.exclusive | self.shared), "mems": self.mems,
                "blockio_class": self.blockio_class, "rdt_class": self.rdt_class, "managed": self.managed,
                "sched_class": self.sched_class,
                "effective_cpus": None if self.effective_cpus is None else str(self.effective_cpus),
                "narrowed_by": self.narrowed_by, "exclusive_wanted": self.exclusive_wanted,
                "request_unmet": self.unmet}


@dataclass(frozen=True)
class Refused:
    """A block I/O line of a class the kernel refuses, in the containers of that class that
    have it now (classes.md): the file's name, the line, why, how many, one of them."""

    cls: str
    file: str
    line: str
    reason: str
    containers: int
    example: str  # the first container it was seen in ("default/web:c")
    path: str  # the file there, in full

    def to_document(self) -> dict[str, Any]:
        return {"class": self.cls, "file": self.file, "line": self.line, "reason": self.reason,
                "containers": self.containers, "example": self.example, "path": self.path}


@dataclass(frozen=True)
class TopologySummary:
    """Online, offline and isolated CPUs, and packages > NUMA nodes > cores > threads."""

    online: CPUSet
    offline: CPUSet
    isolated: CPUSet
    # (package id, ((node id, ((core id, threads), ...)), ...)); UNKNOWN ids as the model has them
    packages: tuple[tuple[int, tuple[tuple[int, tuple[tuple[int, CPUSet], ...]], ...]], ...]

    def to_document(self) -> dict[str, Any]:
        return {
            "online": str(self.online), "offline": str(self.offline), "isolated": str(self.isolated),
            "packages": [{"id": _known(pkg), "nodes": [
                {"id": node, "cores": [{"id": _known(core), "cpus": list(cpus.sorted())} for core, cpus in cores]}
                for node, cores in nodes]} for pkg, nodes in self.packages],
        }


@dataclass(frozen=True)
class ReloadStats:
    """The last configuration applied or refused (at start-up, a push of the agent, SIGHUP)."""

    ok: bool | None = None  # None: none tried yet
    at: float = 0.0  # when (Unix time)
    source: str = ""  # where it came from
    error: str = ""  # why it was refused; what was in force stays
    last_success_at: float = 0.0  # the last one that went into force (0: none yet)

    def to_document(self) -> dict[str, object]:
        return {"ok": self.ok, "at": self.at, "source": self.source, "error": self.error or None,
                "last_success_at": self.last_success_at or None}


@dataclass(frozen=True)
class EngineState:
    policy: str
    dry_run: bool
    config: Config | None  # None: none applied yet
    topology: TopologySummary | None  # None: not discovered (the none policy)
    pools: tuple[tuple[str, CPUSet], ...]
    containers: tuple[ContainerState, ...]
    # Every pool as the policy reports it (kind, parent, members...: balloons, a pool tree).
    pool_usage: tuple[PoolUsage, ...] = ()
    reload: ReloadStats = ReloadStats()
    # CPU classes (docs/classes.md): each class's CPUs, and the writes the kernel refused by path.
    cpu_classes: tuple[tuple[str, CPUSet], ...] = ()
    cpu_class_failures: tuple[tuple[str, str, str], ...] = ()  # (path, value, error)
    blockio_refused: tuple[Refused, ...] = ()
    irq_affinity: tuple[tuple[int, CPUSet], ...] = ()  # the controllable IRQs' affinities, as written

    def to_document(self) -> dict[str, Any]:
        config = None if self.config is None else {"source": self.config.source,
                                                   "document": self.config.to_document()}
        return {"format": FORMAT, "version": VERSION, "policy": self.policy, "dry_run": self.dry_run,
                "config": config, "reload": self.reload.to_document(),
                "topology": None if self.topology is None else self.topology.to_document(),
                "pools": {name: str(cpus) for name, cpus in self.pools},
                "pool_table": [_pool_row(p) for p in self.pool_usage],
                "containers": [c.to_document() for c in self.containers],
                "unmet_requests": sum(c.unmet for c in self.containers),
                "cpu_classes": {name: str(cpus) for name, cpus in self.cpu_classes},
                "cpu_class_failures": [{"path": p, "value": v, "error": e} for p, v, e in self.cpu_class_failures],
                "blockio_refused": [r.to_document() for r in self.blockio_refused],
                "irq_affinity": {str(n): str(cpus) for n, cpus in self.irq_affinity}}


def _pool_row(p: PoolUsage) -> dict[str, Any]:
    return {"name": p.name, "kind": p.kind, "parent": p.parent, "cpus": str(p.cpus),
            "exclusive_cpus": str(p.exclusive), "shared_cpus": str(p.shared), "mems": p.mems,
            "containers": len(p.containers), "requested_milli": p.requested_milli, "hidden_cpus": str(p.hidden)}


def summarise(topo: Topology) -> TopologySummary:
    """The machine as `cri-resmgr status` draws it. A node spanning packages shows
    under each, with that package's part of it."""
    packages = []
    cores = topo.cores()
    for pkg in topo.package_ids():
        pcpus = topo.package_cpus(pkg)
        nodes = []
        for nid in topo.cpu_node_ids():
            ncpus = topo.node_cpus(nid) & pcpus
            if ncpus:
                nodes.append((nid, tuple((topo.cpu(c.min()).core, c & ncpus) for c in cores
                                         if not c.isdisjoint(ncpus))))
        packages.append((pkg, tuple(nodes)))
    return TopologySummary(topo.online, topo.offline, topo.isolated, tuple(packages))


def take(policy_name: str, policy: Policy | None, cache: Cache | None, topology: TopologySummary | None,
         config: Config | None, dry_run: bool,
         classes: Callable[[str], tuple[str | None, str | None]] | None = None,
         reload: ReloadStats | None = None, cpu_classes: CpuClassStats | None = None,
         blockio_refused: tuple[Refused, ...] = (),
         narrowed: Callable[[str], tuple[CPUSet, str] | None] | None = None,
         sched: Callable[[str], str | None] | None = None,
         irqs: Mapping[int, CPUSet] | None = None) -> EngineState:
    """The snapshot; call it where the cache and the policy are owned (the event loop).
    `classes`: a container's (blockio, rdt) classes by its key; `blockio_refused`: the
    class controller's refused lines; `narrowed`: what the kernel enforces of a container's
    cpuset, and which cgroup narrows it, by its key, when a parent cgroup narrows it;
    `sched`: a container's scheduling class by its key; `irqs`: the controllable IRQs'
    affinities."""
    usage = policy.usage() if policy is not None else None
    pools: Mapping[str, CPUSet] = usage.pool_cpus() if usage is not None else {}
    containers = []
    wanted = getattr(policy, "exclusive_wanted", None)  # the pool policies and balloons say
    for c in cache or ():
        w = c.workload
        assignment = policy.assignment(c.key) if policy is not None and not c.released else None
        resources = policy.resources(c.key) if assignment is not None and policy is not None else None
        exclusive = assignment.exclusive if assignment is not None else CPUSet()
        cpus = resources.cpuset_cpus if resources is not None else CPUSet()
        blockio_class, rdt_class = classes(c.key) if classes is not None else (None, None)
        kernel = narrowed(c.key) if narrowed is not None else None
        containers.append(ContainerState(
            id=c.id, namespace=w.namespace, pod=w.pod, name=w.name, qos=w.qos.value, state=c.state,
            cpu_request=w.cpu_request, cpu_limit=w.cpu_limit, memory_request=w.memory_request,
            memory_limit=w.memory_limit, pool=assignment.pool if assignment is not None else None,
            exclusive=exclusive, shared=cpus - exclusive,
            mems=resources.cpuset_mems if resources is not None else None,
            blockio_class=blockio_class, rdt_class=rdt_class, sched_class=sched(c.key) if sched is not None else None,
            effective_cpus=kernel[0] if kernel is not None else None, narrowed_by=kernel[1] if kernel else None,
            exclusive_wanted=wanted(w) if wanted is not None and assignment is not None else 0))
    containers.sort(key=lambda s: (s.namespace, s.pod, s.name, s.id))
    return EngineState(policy=policy_name, dry_run=dry_run, config=config, topology=topology,
                       pools=tuple(sorted(pools.items())), containers=tuple(containers),
                       pool_usage=usage.pools if usage is not None else (), reload=reload or ReloadStats(),
                       cpu_classes=tuple(cpu_classes.cpus.items()) if cpu_classes is not None else (),
                       cpu_class_failures=tuple((p, v, e) for p, (v, e) in sorted(cpu_classes.failed.items()))
                       if cpu_classes is not None else (),
                       blockio_refused=blockio_refused, irq_affinity=tuple(sorted((irqs or {}).items())))


def _known(value: int) -> int | None:
    return None if value == UNKNOWN else value
