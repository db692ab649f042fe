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
  the free exclusive-capable ones;
* memory on the CPUs' nodes: a cpuset.mems with ordinary memory holds, for each NUMA node
  of the container's CPUs, that node (a CPU-only node: one of its nearest nodes with
  memory), so the kernel allocates locally first (one asking only for PMEM/HBM is free to);
  and a new container running on its exclusive CPUs alone has no ordinary memory beyond
  its CPUs' nodes' when those hold its memory request and limit;
* no SMT core split while whole cores were free: a new container's exclusive CPUs do not
  take a core's worth of threads from cores they leave half taken (their siblings free)
  while another core, wholly free before (of the same kind: isolated or not) in the same
  NUMA node and L3 group, stayed out of them; free is what the policy could have given
  (its usage's exclusive_free: no pool or balloon holds it, no container has it);
* no L3 or NUMA span while one would do (a policy that creates pools, balloons, says so with
  `creates_pools`): a pool a call created (a new balloon) on CPUs of
  more than one NUMA node's part of an L3 group (the node where there is no L3 data), while
  one such part had that many CPUs free before the call (a HideHyperthreads one: that many
  whole cores), not counting the reserved CPUs, their cores' other threads and the
  kernel's isolated CPUs (which a policy takes last) nor what other pools hold after it;
* no Guaranteed container sharing CPUs when the requests fit (judged when it is decided
  on, created or resized): a Guaranteed container with
  whole CPUs (not prefer-shared, not on the reserved CPUs) holds that many exclusive CPUs
  whenever the CPU requests of all live containers, the shared ones rounded up to whole
  CPUs and at least one, fit the available CPUs that are neither reserved nor isolated
  (a pool hiding hyperthreads neither counted as room nor its requests as need); what
  the configuration caps (a balloon type's MaxCPUs, the policy's isolation_cap) is all
  that is expected, and the shared pool's own CPU beside the reserved ones is needed
  where the policy keeps one (its shared_floor); a pool tree's leaves keep their shared
  containers apart, each at least a CPU of its own: rounded up leaf by leaf (_kept_apart).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.engine.cache import Cache
from cri_resmgr.policy.api import Policy, QoS, Resources, Workload
from cri_resmgr.policy.pools import memory_nodes
from cri_resmgr.policy.usage import PolicyUsage, PoolUsage
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
    reserved: CPUSet = field(default_factory=CPUSet)
    # Check that Guaranteed containers with whole CPUs get them exclusive when the
    # requests fit (a policy whose containers share CPUs by design turns it off).
    isolation: bool = True
    violations: list[str] = field(default_factory=list)
    count: int = 0
    checks: int = 0  # containers checked, incrementally or in full passes
    full_passes: int = 0
    _owner: dict[int, str] = field(default_factory=dict)  # exclusive CPU -> key
    _exclusive_of: dict[str, CPUSet] = field(default_factory=dict)
    _all: set[int] = field(default_factory=set)  # every exclusive CPU in use
    _mems_ok: dict[str, str | None] = field(default_factory=dict)
    _memo: dict[tuple[CPUSet, str | None, CPUSet], str | None] = field(default_factory=dict)
    _requests: dict[str, int] = field(default_factory=dict)  # live container -> CPU request (milli)
    _local: dict[int, frozenset[int]] = field(default_factory=dict)  # CPU node -> its memory nodes
    _dram: frozenset[int] = frozenset()  # nodes holding ordinary memory
    _area: dict[int, CPUSet] = field(default_factory=dict)  # CPU -> its node's CPUs in its L3 group
    # Each CPU node with its CPUs (a bitmask, CPUSet.as_mask), ascending: the nodes a
    # cpuset touches, found per node.
    _node_cpus: list[tuple[int, int]] = field(default_factory=list)
    # Each NUMA node's part of each L3 group (the node without L3 data), as bitmasks; the
    # CPUs a new pool takes last (reserved, their cores' threads, isolated); the pools by
    # name and the free CPUs after the last call that changed anything (None: not known).
    _areas: list[int] = field(default_factory=list)
    _last_taken: int = 0
    _pools_seen: dict[str, CPUSet] | None = None
    _free_seen: CPUSet = field(default_factory=CPUSet)

    def __post_init__(self) -> None:
        self._local = memory_nodes(self.topology)
        self._dram = frozenset().union(*self._local.values()) if self._local else frozenset()
        by_node: dict[int, int] = {}
        for cpu, info in self.topology.cpus.items():
            by_node[info.node] = by_node.get(info.node, 0) | 1 << cpu
        self._node_cpus = sorted(by_node.items())
        l3s = [g.as_mask() for g in self.topology.groups("l3")]
        for _, mask in self._node_cpus:
            parts = [mask & g for g in l3s if mask & g]
            self._areas.extend(parts or [mask])
        beside = CPUSet(c for r in self.reserved for c in self.topology.siblings(r))
        self._last_taken = (beside | self.reserved | self.topology.isolated).as_mask()
        self._see_pools()

    def _see_pools(self) -> PolicyUsage | None:
        """The pools now, kept for the next call (only for a policy that creates pools as it
        goes, balloons: its `creates_pools`; a pool tree's usage is costly to ask per call)."""
        if not getattr(self.policy, "creates_pools", False):
            return None
        u = self.policy.usage()
        self._pools_seen = {p.name: p.cpus for p in u.pools}
        self._free_seen = u.exclusive_free
        return u

    def fail(self, where: str, text: str) -> None:
        self.count += 1
        if len(self.violations) < MAX_KEPT:
            self.violations.append(f"{where}: {text}")

    # -- after each call ----------------------------------------------------------

    def after_call(self, where: str, events: Iterable[Event]) -> None:
        reported: dict[str, Resources | None] = {}
        events = list(events)
        subjects = {e.key for e in events}
        allocated: list[str] = []
        for e in events:
            if e.action in ("allocate", "resize"):
                reported[e.key] = e.decision.resources
                allocated.append(e.key)
                c = self.cache.containers.get(e.key)
                if c is not None:
                    self._requests[e.key] = self._request(c.workload)
            else:
                reported[e.key] = None
                self._requests.pop(e.key, None)
            reported.update(e.decision.others)
        resources, containers = self.policy.resources, self.cache.containers
        for key in subjects:  # what a released container held is free before others are judged
            if not self._alive(key):
                self._set_exclusive(where, key, _EMPTY)
        self._refresh_moved(where, reported.keys() - subjects)
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
        for key in allocated:
            if self._alive(key):
                self._placement(where, key, new=True)
        if events:
            self._new_pools(where)

    def _new_pools(self, where: str) -> None:
        """A pool this call created spans L3 groups (or NUMA nodes) while one had room."""
        before, free = self._pools_seen, self._free_seen
        usage = self._see_pools()
        if usage is None or before is None:
            return
        for pool in usage.pools:
            if pool.name in before or not pool.cpus:
                continue
            problem = self._span_problem(pool, usage, free)
            if problem:
                self.fail(where, f"new pool {pool.name}: {problem}")

    def _span_problem(self, pool: PoolUsage, usage: PolicyUsage, free: CPUSet) -> str | None:
        mask = pool.cpus.as_mask()
        touched = [a for a in self._areas if a & mask]
        if len(touched) < 2:
            return None
        others = 0
        for p in usage.pools:
            if p.name != pool.name:
                others |= p.cpus.as_mask()
        room = free.as_mask() & self.available.as_mask() & ~others & ~self._last_taken
        topo = self.topology
        cores = bool(pool.hidden)
        want = len({topo.siblings(c) for c in pool.cpus}) if cores else len(pool.cpus)
        for area in self._areas:
            here = room & area
            count = here.bit_count()
            if count < want:
                continue
            if cores:
                cpus = CPUSet.of_mask(here)
                count = len({topo.siblings(c) for c in cpus if topo.siblings(c) <= cpus})
            if count >= want:
                unit = "whole cores" if cores else "CPUs"
                return (f"{len(pool.cpus)} CPUs {pool.cpus} span {len(touched)} L3 groups or NUMA nodes while "
                        f"CPUs {CPUSet.of_mask(area)} of one had {count} {unit} free")
        return None

    def _refresh_moved(self, where: str, others: Iterable[str]) -> None:
        """An other whose new cpuset leaves out the exclusive CPUs last seen was given new
        ones without a decision on it (a dedicated balloon moved or grew on another's
        release): its exclusive CPUs are asked again, all released before any is taken, so
        that nobody is judged against CPUs it gave up (they were reported as double-booked)."""
        stale = []
        for key in others:
            last = self._exclusive_of.get(key)
            held = self.policy.resources(key) if last is not None else None
            if held is not None and not last <= held.cpuset_cpus:
                stale.append(key)
        fresh = []
        for key in stale:
            a = self.policy.assignment(key)
            fresh.append((key, a.exclusive if a is not None else _EMPTY))
            self._set_exclusive(where, key, _EMPTY)
        for key, exclusive in fresh:
            self._set_exclusive(where, key, exclusive)

    def _placement(self, where: str, key: str, new: bool) -> None:
        """A placed container's exclusive CPUs: whole cores (`new`: just decided), and
        a Guaranteed one's isolation."""
        exclusive = self._exclusive_of.get(key, _EMPTY)
        if new and len(exclusive) > 1:
            problem = self._split_problem(exclusive)
            if problem:
                self.fail(where, f"{self._name(key)}: {problem}")
        c = self.cache.containers.get(key)
        if new and exclusive and c is not None:
            problem = self._wide_memory(c.workload, exclusive, self.policy.resources(key))
            if problem:
                self.fail(where, f"{self._name(key)}: {problem}")
        # Judged when the container is decided on: a policy does not move a container placed
        # shared (too little room then) when room comes back later, e.g. by a release.
        if self.isolation and new and c is not None and self.policy.resources(key) is not None:
            problem = self._isolation_problem(c.workload, exclusive)
            if problem:
                self.fail(where, f"{self._name(key)}: {problem}")

    def _split_problem(self, exclusive: CPUSet) -> str | None:
        """Threads of a core's worth taken from cores left half used, while a core that was
        wholly free (before this container) stayed out: swapping them keeps every count.

        Free is what the policy could have given: no other container's exclusive CPU, not
        reserved, and not held by a pool or balloon (the policy's usage().exclusive_free,
        after the call, with the container's own CPUs back). A shared balloon's CPUs are
        no container's exclusive ones but are not free: taking the other thread of a core
        whose sibling a balloon holds splits nothing the policy could have kept whole. The
        first pass leaves out the policy's word (it costs a usage()); only a split found
        that way is judged again with it."""
        others = self._all - exclusive.as_frozenset()  # exclusive to the other containers

        def unheld(cpu: int) -> bool:
            return cpu not in others and cpu in self.available and cpu not in self.reserved

        if self._split(exclusive, unheld) is None:
            return None
        givable = self.policy.usage().exclusive_free | exclusive
        return self._split(exclusive, lambda cpu: cpu in givable and unheld(cpu))

    def _split(self, exclusive: CPUSet, free: Callable[[int], bool]) -> str | None:
        topo = self.topology
        stray: list[int] = []  # exclusive CPUs whose core still has a free thread
        width = 1
        for cpu in exclusive:
            core = topo.siblings(cpu)
            if any(s not in exclusive and free(s) for s in core):
                stray.append(cpu)
                width = max(width, len(core))
        if width < 2 or len(stray) < width:
            return None
        isolated = topo.isolated
        kind = stray[0] in isolated
        area = CPUSet().union(*(self._area_of(c) for c in stray))
        seen: set[int] = set()
        found: CPUSet | None = None  # a free core; one the container has no thread of, if any
        for cpu in area:
            if cpu in seen:
                continue
            core = topo.siblings(cpu)
            seen.update(core)
            if len(core) < 2 or not core <= area or core <= exclusive:
                continue
            if all(free(s) and (s in isolated) == kind for s in core):
                found = core
                if core.isdisjoint(exclusive):
                    break
        if found is None:
            return None
        return f"exclusive CPUs {exclusive} split the cores of CPUs {CPUSet(stray)} while core {found} was free"

    def _wide_memory(self, w: Workload, exclusive: CPUSet, held: Resources | None) -> str | None:
        """A container running on its exclusive CPUs alone whose ordinary memory nodes go
        beyond its CPUs' nodes' memory though that holds what it asks (its memory request
        or limit): the kernel may then allocate far from its CPUs for no reason."""
        if held is None or not held.cpuset_mems or not held.cpuset_cpus <= exclusive or not self._local:
            return None
        nodes = CPUSet.parse(held.cpuset_mems).as_frozenset() & self._dram
        local = frozenset().union(*(self._local.get(n, frozenset()) for n in self.topology.nodes_of(exclusive)))
        beyond = nodes - local
        if not beyond or not local <= nodes:
            return None
        asked = max(w.memory_request, w.memory_limit or 0)
        room = sum(self.topology.nodes[n].memory_kb for n in local) * 1024
        if w.memory_limit is None or asked > room:
            return None
        return (f"cpuset_mems {held.cpuset_mems} holds node(s) {CPUSet(beyond)} beyond the memory of its CPUs' "
                f"nodes (CPUs {exclusive}: memory node(s) {CPUSet(local)}), which hold its {asked >> 20} MiB")

    def _area_of(self, cpu: int) -> CPUSet:
        area = self._area.get(cpu)
        if area is None:
            topo = self.topology
            area = topo.node_cpus(topo.node_of(cpu))
            for group in topo.groups("l3"):
                if cpu in group:
                    area = area & group
                    break
            for c in area:
                self._area[c] = area
        return area

    def _isolation_problem(self, w: Workload, exclusive: CPUSet) -> str | None:
        whole, fraction = divmod(w.cpu_request, 1000)
        if w.qos is not QoS.GUARANTEED or not whole or fraction or w.prefer_shared:
            return None
        expects = getattr(self.policy, "expects_isolation", None)
        if expects is not None and not expects(w):
            return None
        if self.reserved and (w.system or w.prefer_reserved):
            return None
        cap = self._cap(w)
        if len(exclusive) >= (whole if cap is None else min(whole, cap)):
            return None
        isolated = sum(r for k, r in self._requests.items() if self._wants_isolation(k))
        shared = sum(self._requests.values()) - isolated
        capacity = 1000 * len(self.available - self.reserved - self.topology.isolated)
        # The shared containers need a CPU of their own only where no reserved CPU is there
        # for them (kubelet's shared pool keeps the reserved CPUs); a policy whose shared
        # pool keeps one beside its reserved CPUs (static-plus) says so.
        floor = getattr(self.policy, "shared_floor", 0 if self.reserved else 1)
        need = isolated + 1000 * max(floor, -(-shared // 1000))
        if need > capacity:
            return None
        # Judged again with the policy's usage (a cost only here): a pool that hides its
        # cores' sibling threads (a HideHyperthreads balloon) holds whole cores for requests
        # counted in threads, and gives none of them way: its CPUs are no capacity, its
        # containers' requests no need.
        usage = self.policy.usage()
        hiding = [p for p in usage.pools if p.hidden]
        if hiding:
            held = CPUSet().union(*(p.cpus for p in hiding))
            capacity -= 1000 * len(held & (self.available - self.reserved - self.topology.isolated))
            shared -= sum(p.requested_milli for p in hiding)
            need = isolated + 1000 * max(floor, -(-shared // 1000))
            if need > capacity:
                return None
        # A pool keeping CPUs whatever its requests (a balloon type's MinCPUs) holds them
        # beyond what its containers ask: they are needed too.
        kept = sum(max(0, 1000 * p.kept - p.requested_milli) for p in usage.pools if p.kept and not p.hidden)
        if kept:
            need += kept
            if need > capacity:
                return None
        # A pool tree's leaves hold their shared containers apart (topology-aware: a shared
        # container stays in its pool, and each leaf keeps CPUs of its own for the ones it
        # holds, at least one): their requests are rounded up leaf by leaf, not once.
        apart = self._kept_apart(usage, w.key)
        if apart > 1000 * max(floor, -(-shared // 1000)):
            need += apart - 1000 * max(floor, -(-shared // 1000))
            if need > capacity:
                return None
        text = (f"a Guaranteed container of {whole} CPUs holds {len(exclusive)} exclusive CPUs although the "
                f"requests fit ({need}m of {capacity}m)")
        # Pools of their own CPUs (balloons: not a tree's nested pools) holding whole CPUs
        # beyond their requests and what they keep by configuration (MinCPUs, counted
        # above): not given way (a policy fault?). Named, for the reader.
        owners = Counter(cpu for p in usage.pools for cpu in p.cpus)
        slack = [f"{p.name} {len(p.cpus - self.reserved)} CPUs for {p.requested_milli}m" for p in usage.pools
                 if p.kind and not p.exclusive and not p.hidden and all(owners[cpu] == 1 for cpu in p.cpus)
                 and len(p.cpus - self.reserved) > max(p.kept, -(-p.requested_milli // 1000))]
        return f"{text}; held beyond their requests: {', '.join(slack[:5])}" if slack else text

    def _kept_apart(self, usage: PolicyUsage, key: str) -> int:
        """Milli-CPU the leaves of the policy's pool tree (pools naming a parent, and no
        pool naming them) keep for their shared containers, `key` left out: each leaf
        with any, its shared requests rounded up and at least one CPU, less its reserved
        CPUs (its shared containers run on those too). The containers expected to be
        exclusive count as their own CPUs, not here. 0 without a tree."""
        parents = {p.parent for p in usage.pools if p.parent}
        if not parents:
            return 0
        total = 0
        for pool in usage.pools:
            if not pool.parent or pool.name in parents:
                continue
            milli, members = 0, 0
            for k in pool.containers:
                if k == key or k not in self._requests or self._wants_isolation(k):
                    continue
                members += 1
                milli += max(0, self._requests[k] - 1000 * len(self._exclusive_of.get(k, _EMPTY)))
            if members:
                total += 1000 * max(0, max(1, -(-milli // 1000)) - len(pool.cpus & self.reserved))
        return total

    def _cap(self, w: Workload) -> int | None:
        """The most exclusive CPUs the configuration lets `w` hold (a balloon type's MaxCPUs),
        as the policy's isolation_cap says; None: no cap."""
        cap = getattr(self.policy, "isolation_cap", None)
        return cap(w) if cap is not None else None

    def _request(self, w: Workload) -> int:
        """`w`'s CPU request as the check counts it: what a capped dedicated container can
        hold, not what it asks beyond that (it runs on no more)."""
        cap = self._cap(w) if w.qos is QoS.GUARANTEED else None
        return w.cpu_request if cap is None else min(w.cpu_request, 1000 * cap)

    def _wants_isolation(self, key: str) -> bool:
        c = self.cache.containers.get(key)
        if c is None:
            return False
        w = c.workload
        expects = getattr(self.policy, "expects_isolation", None)
        if expects is not None:  # a policy whose containers share CPUs by design says which do not
            return bool(expects(w))
        return (w.qos is QoS.GUARANTEED and w.cpu_request >= 1000 and not w.cpu_request % 1000
                and not w.prefer_shared and not (self.reserved and (w.system or w.prefer_reserved)))

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
        far = self._far_memory(cpus, mems)
        if far:
            return far
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

    def _far_memory(self, cpus: CPUSet, mems: str | None) -> str | None:
        """Memory on the CPUs' nodes: each of their nodes' local memory is allowed."""
        if not mems or not self._local:
            return None
        return self._far_problem(cpus, mems)

    def _far_problem(self, cpus: CPUSet, mems: str) -> str | None:
        nodes = CPUSet.parse(mems).as_frozenset()
        if nodes.isdisjoint(self._dram):
            return None  # only far memory or HBM, asked for
        # Per node, not per CPU, and no memo by cpuset: a memo of the thousands of distinct
        # 4096-CPU sets a churn makes (static-plus: one per fractional container per pool
        # change) kept them alive (some 600 MB as frozensets), and the collector's passes
        # over them landed in the timed calls.
        mask = cpus.as_mask()
        missing = [n for n, node_cpus in self._node_cpus
                   if node_cpus & mask and n in self._local and nodes.isdisjoint(self._local[n])]
        if missing:
            return (f"cpuset_mems {mems} leaves out the memory of node(s) {', '.join(map(str, missing))} "
                    f"of its CPUs {cpus}")
        return None

    # -- everything -----------------------------------------------------------------

    def full(self, where: str) -> None:
        """Every container and pool from scratch (rebuilds the exclusive owners)."""
        self.full_passes += 1
        self._owner.clear()
        self._all.clear()
        self._exclusive_of.clear()
        self._memo.clear()
        held = dict(self.policy.assignments())
        self._requests = {key: self._request(c.workload) for key, c in self.cache.containers.items()
                          if not c.released and key in held}
        for key in held:
            if not self._alive(key):
                self.fail(where, f"the policy holds {self._name(key)}, which is not alive (leaked)")
        for key in held:
            if self._alive(key):
                self._check_one(where, key, self.policy.resources(key), True)
        for key in held:
            if self._alive(key):
                self._placement(where, key, new=False)
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
