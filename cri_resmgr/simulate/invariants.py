"""What must hold whatever the policy: checked after every call for the containers it
touched, and over everything at the end (and every N calls when asked). After a call,
the exclusive CPUs of the containers decided on are asked of the policy; those of the
others it moved are the ones last seen (the full passes ask for every container).

* every live container the policy placed has a non-empty cpuset within the CPUs the
  policy may use, and memory nodes the machine has;
* its exclusive CPUs are in its cpuset and nobody else's: not another container's
  exclusive CPUs, not in anyone's shared part;
* what a decision reported (the container's resources, the others it changed) is what
  the policy holds once the call is done;
* a released container holds nothing; the policy holds no container the engine does
  not know alive (no leak);
* the pools the policy reports keep exclusive CPUs out of the shared pool and out of
  the free exclusive-capable ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.engine.cache import Cache
from cri_resmgr.policy.api import Policy, Resources
from cri_resmgr.simulate.recording import Event
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Checker", "MAX_KEPT"]

MAX_KEPT = 50  # violations kept verbatim; the rest are counted
_EMPTY = CPUSet()


@dataclass
class Checker:
    topology: Topology
    available: CPUSet
    policy: Policy
    cache: Cache
    violations: list[str] = field(default_factory=list)
    count: int = 0
    checks: int = 0  # containers checked, incrementally or in full passes
    full_passes: int = 0
    _owner: dict[int, str] = field(default_factory=dict)  # exclusive CPU -> key
    _exclusive_of: dict[str, CPUSet] = field(default_factory=dict)
    _all: set[int] = field(default_factory=set)  # every exclusive CPU in use
    _mems_ok: dict[str, str | None] = field(default_factory=dict)
    _memo: dict[tuple[CPUSet, str | None, CPUSet], str | None] = field(default_factory=dict)

    def fail(self, where: str, text: str) -> None:
        self.count += 1
        if len(self.violations) < MAX_KEPT:
            self.violations.append(f"{where}: {text}")

    # -- after each call ----------------------------------------------------------

    def after_call(self, where: str, events: Iterable[Event]) -> None:
        reported: dict[str, Resources | None] = {}
        events = list(events)
        subjects = {e.key for e in events}
        for e in events:
            if e.action in ("allocate", "resize"):
                reported[e.key] = e.decision.resources
            else:
                reported[e.key] = None
            reported.update(e.decision.others)
        resources, containers = self.policy.resources, self.cache.containers
        # Within one call the others a decision moved mostly share a few Resources objects:
        # each object is judged once (the objects stay alive while the call is checked).
        judged: dict[int, str | None] = {}
        for key, said in reported.items():
            held = resources(key)
            c = containers.get(key)
            alive = c is not None and not c.released
            if said is not None and held is not said and alive and held != said:
                self.fail(where, f"{self._name(key)}: a decision said {_text(said)} but the policy holds "
                                 f"{_text(held)}")
            if key in subjects or not alive or held is None or key in self._exclusive_of:
                self._check_one(where, key, held, alive, key in subjects)
                continue
            self.checks += 1  # an other without exclusive CPUs: only its cpuset can be wrong
            problem = judged.get(id(held), "?")
            if problem == "?":
                problem = judged[id(held)] = self._cpuset_problem(held.cpuset_cpus, held.cpuset_mems, _EMPTY)
            if problem:
                self.fail(where, f"{self._name(key)}: {problem}")

    def _check_one(self, where: str, key: str, held: Resources | None, alive: bool, exact: bool = True) -> None:
        """`exact`: ask the policy for the container's exclusive CPUs; else (an other whose
        cpuset a decision moved) take the ones last seen: a policy's assignment() may be
        costly, and a full pass asks it for every container."""
        self.checks += 1
        if not alive:
            if held is not None:
                self.fail(where, f"{self._name(key)} was released but the policy still gives it {_text(held)}")
            self._set_exclusive(where, key, _EMPTY)
            return
        if held is None:
            return  # not placed by the policy (a policy error, reported as such)
        cpus = held.cpuset_cpus
        if exact:
            assignment = self.policy.assignment(key)
            exclusive = assignment.exclusive if assignment is not None else _EMPTY
        else:
            exclusive = self._exclusive_of.get(key, _EMPTY)
        if exclusive and not exclusive <= cpus:
            self.fail(where, f"{self._name(key)}: exclusive CPUs {exclusive - cpus} are not in its cpuset {cpus}")
        self._set_exclusive(where, key, exclusive)
        # Shared containers hold the same few cpusets: each is judged once until owners change.
        memo_key = (cpus, held.cpuset_mems, exclusive)
        problem = self._memo.get(memo_key, "?")
        if problem == "?":
            problem = self._memo[memo_key] = self._cpuset_problem(cpus, held.cpuset_mems, exclusive)
        if problem:
            self.fail(where, f"{self._name(key)}: {problem}")

    def _cpuset_problem(self, cpus: CPUSet, mems: str | None, exclusive: CPUSet) -> str | None:
        if not cpus:
            return "empty cpuset"
        if not cpus <= self.available:
            return f"CPUs {cpus - self.available} are not available to the policy ({self.available})"
        bad_mems = self._bad_mems(mems)
        if bad_mems:
            return f"cpuset_mems {mems!r}: {bad_mems}"
        foreign = (cpus - exclusive).as_frozenset() & self._all
        if foreign:
            return (f"cpuset {cpus} includes CPUs {CPUSet(foreign)} exclusive to "
                    f"{self._name(self._owner[min(foreign)])}")
        return None

    def _set_exclusive(self, where: str, key: str, exclusive: CPUSet) -> None:
        old = self._exclusive_of.get(key, _EMPTY)
        if old == exclusive:
            return
        self._exclusive_of.pop(key, None)
        for cpu in old - exclusive:
            if self._owner.get(cpu) == key:
                del self._owner[cpu]
                self._all.discard(cpu)
        for cpu in exclusive - old:
            other = self._owner.get(cpu)
            if other is not None and other != key:
                self.fail(where, f"CPU {cpu} is exclusive to both {self._name(other)} and {self._name(key)}")
            self._owner[cpu] = key
            self._all.add(cpu)
        self._memo.clear()
        if exclusive:
            self._exclusive_of[key] = exclusive

    # -- everything -----------------------------------------------------------------

    def full(self, where: str) -> None:
        """Every container and pool from scratch (rebuilds the exclusive owners)."""
        self.full_passes += 1
        self._owner.clear()
        self._all.clear()
        self._exclusive_of.clear()
        self._memo.clear()
        held = dict(self.policy.assignments())
        for key in held:
            if not self._alive(key):
                self.fail(where, f"the policy holds {self._name(key)}, which is not alive (leaked)")
        for key in held:
            if self._alive(key):
                self._check_one(where, key, self.policy.resources(key), True)
        self._check_pools(where)

    def _check_pools(self, where: str) -> None:
        usage = self.policy.usage()
        in_use = CPUSet(self._owner)
        for pool in usage.pools:
            if not pool.exclusive <= pool.cpus:
                self.fail(where, f"pool {pool.name}: exclusive CPUs {pool.exclusive - pool.cpus} outside the pool")
            if pool.shared & in_use:
                self.fail(where, f"pool {pool.name}: shared CPUs {pool.shared & in_use} are exclusive to containers")
        if usage.exclusive_free & in_use:
            self.fail(where, f"CPUs {usage.exclusive_free & in_use} are reported free but are exclusive to containers")
        reported = CPUSet().union(*usage.exclusive.values())
        if reported != in_use:
            self.fail(where, f"the policy's usage reports exclusive CPUs {reported}, its containers hold {in_use}")

    # -- helpers --------------------------------------------------------------------

    def _alive(self, key: str) -> bool:
        c = self.cache.containers.get(key)
        return c is not None and not c.released

    def _name(self, key: str) -> str:
        c = self.cache.containers.get(key)
        return str(c.workload) if c is not None else key

    def _bad_mems(self, mems: str | None) -> str | None:
        if not mems:
            return None
        if mems not in self._mems_ok:
            self._mems_ok[mems] = _mems_problem(mems, self.topology.nodes)
        return self._mems_ok[mems]


def _mems_problem(mems: str, nodes: Mapping[int, object]) -> str | None:
    try:
        ids = CPUSet.parse(mems)  # the same list syntax
    except ValueError as e:
        return str(e)
    unknown = [n for n in ids if n not in nodes]
    return f"nodes {CPUSet(unknown)} are not NUMA nodes of the machine" if unknown else None


def _text(r: Resources | None) -> str:
    return "nothing" if r is None else f"cpus {r.cpuset_cpus} mems {r.cpuset_mems or '-'}"
