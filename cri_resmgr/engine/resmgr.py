"""The resource manager: the engine's core (`engine/core.py`'s `Core`) under a policy.
For each runtime event a front end hands in, in the engine's own forms, it keeps
the cache, asks the policy, and enforces its decisions on the other containers;
it returns the decision for the container itself. It knows no front end: the
relay's CRI adapter is `engine/cri.py`, the NRI plugin's hooks `nri/hooks.py`.

Allocation changes are serialized by one lock; the lock is never held across a
runtime call: a container is allocated first, created by the runtime (the step
the front end gives in), and its allocation released if the runtime refuses it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.bounded import clip
from cri_resmgr.buckets import Histogram, HistogramSnapshot
from cri_resmgr.config.schema import DEFAULT_RESERVED_NAMESPACES
from cri_resmgr.engine import adopt, classify, describe, podsize, realcpuset, resdict, resize, timers
from cri_resmgr.engine.cache import Cache, ContainerRecord, PodRecord
from cri_resmgr.engine.classes import ClassControl
from cri_resmgr.engine.core import (
    CONTAINER_EVENTS,
    EXITS,
    POD_EVENTS,
    ContainerSpec,
    CreateStep,
    PodResizeStep,
    PolicyFailed,
    ResizeRefused,
    StartStep,
    UpdateStep,
    write_cpuset,
)
from cri_resmgr.engine.cpuclasses import CpuClassControl
from cri_resmgr.engine.enforce import Enforcer
from cri_resmgr.engine.nodectl import NodeControl
from cri_resmgr.engine.runtime import RuntimeFailure, RuntimePort
from cri_resmgr.engine.saves import Saves
from cri_resmgr.policy import resize as policy_resize
from cri_resmgr.policy.api import Assignment, Decision, Policy, ResizeError, Resources, Workload
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

# Every event, and containers seen exited.
EVENTS = POD_EVENTS | CONTAINER_EVENTS | {EXITS}


@dataclass
class Options:
    dry_run: bool = False
    fail_closed: bool = False
    reserved_namespaces: tuple[str, ...] = DEFAULT_RESERVED_NAMESPACES


@dataclass(frozen=True)
class ManagerStats:
    """A snapshot of a resource manager's counters (see `ResourceManager.stats`)."""

    decisions: int = 0
    policy_errors: int = 0
    released_on_exit: int = 0
    exclusive_denied: int = 0  # asked for exclusive CPUs, placed without them
    resizes: int = 0  # in-place resizes the policy re-decided
    resizes_refused: int = 0  # resizes that could not be met (the update failed)
    containers: int = 0  # tracked by the cache
    decision_latency: HistogramSnapshot | None = None  # policy.allocate, wall time


@dataclass
class _Counts:
    decisions: int = 0
    policy_errors: int = 0
    released_on_exit: int = 0
    exclusive_denied: int = 0
    resizes: int = 0
    resizes_refused: int = 0


class ResourceManager:
    """The engine's core under one policy (an `engine.core.Core`). `lock` serializes
    allocation changes; the controller passes the same lock to a manager's successor,
    so that the two never change allocations at the same time during a switch."""

    def __init__(self, policy_name: str, policy: Policy, cache: Cache, enforcer: Enforcer | None,
                 lock: asyncio.Lock, options: Options | None = None,
                 note: Callable[[str], None] | None = None,
                 cgroups: realcpuset.CgroupReader | None = None, classes: ClassControl | None = None,
                 cpu_classes: CpuClassControl | None = None, node: NodeControl | None = None):
        self._policy_name = policy_name
        self._classes = classes
        self._cpu_classes = cpu_classes
        self._node = node  # scheduling classes and IRQ affinity (engine/nodectl.py)
        self._policy = policy
        self._cache = cache
        self._enforcer = enforcer
        self._lock = lock
        self._options = options or Options()
        self._counts = _Counts()
        self._decision_latency = Histogram()  # plain integers: read at scrape time
        self._note = note
        self._applied: dict[str, Resources] = {}  # what the runtime was last told, by key
        # -dry-run: what "would set" last said, by key; nothing is applied, so without it every
        # later update batch naming the container said it again.
        self._said: dict[str, Resources] = {}
        # The message each container's `resources` dict stands for, by key, while they
        # agree: _sync changes a copy of it instead of parsing and re-encoding the dict.
        self._linux: dict[str, pb.LinuxContainerResources] = {}
        self._saves = Saves(cache, policy_name, policy)
        # Only a policy with deadlines of its own (timers.py) has a timer: the others' decisions
        # do not call into one to learn there is nothing to arm.
        self._timer = timers.PolicyTimer(policy, self._on_timer) if timers.has_deadlines(policy) else None
        # The reconcile's check of the real cpusets (None: not checked): the reader,
        # each running container's init pid by id, and the (wanted, real) pair each
        # key was last sent again for, so a difference that stays is sent once.
        self._cgroups = cgroups
        self._pids: dict[str, int] = {}
        self._resent: dict[str, tuple[Resources, realcpuset.RealCpuset, bool]] = {}  # bool: said it stays
        # Containers whose cgroup holds the policy's cpuset but whose tasks the kernel keeps on
        # fewer CPUs (a parent cgroup narrowed: realcpuset.py), by key: said once, in /state.
        self._narrowed: dict[str, realcpuset.RealCpuset] = {}

    # -- what the controller reads ---------------------------------------------------

    @property
    def policy_name(self) -> str:
        return self._policy_name

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def cache(self) -> Cache:
        return self._cache

    def assignments(self) -> Mapping[str, Assignment]:
        """The policy's allocations, for a successor with the same policy to keep."""
        return self._policy.assignments()

    def stats(self) -> ManagerStats:
        """The counters as they are now; safe from another thread (metrics)."""
        c = self._counts
        return ManagerStats(decisions=c.decisions, policy_errors=c.policy_errors,
                            released_on_exit=c.released_on_exit, exclusive_denied=c.exclusive_denied,
                            resizes=c.resizes, resizes_refused=c.resizes_refused,
                            containers=len(self._cache.containers),
                            decision_latency=self._decision_latency.snapshot())

    # -- the events the front ends hand in (engine/core.py) ---------------------------

    @property
    def events(self) -> frozenset[str]:
        return EVENTS

    # -- pods ---------------------------------------------------------------------

    async def pod_started(self, pod: PodRecord) -> None:
        async with self._lock:
            self._cache.add_pod(pod)
            self._saves.mark()

    async def pod_stopped(self, pod_id: str) -> None:
        await self._release_pod(pod_id, remove=False)

    async def pod_removed(self, pod_id: str) -> None:
        await self._release_pod(pod_id, remove=True)

    async def _release_pod(self, pod_id: str, remove: bool) -> None:
        async with self._lock:
            changed: set[str] = set()
            for c in self._cache.of_pod(pod_id):
                changed |= self._release(c)
            pod = self._cache.pods.get(pod_id)
            what = f"pod {pod.namespace}/{pod.name}" if pod is not None else f"pod {pod_id[:12]}"
            if remove:
                self._cache.remove_pod(pod_id)
            self._sync(changed, f"{'removing' if remove else 'stopping'} {what}")
            self._saves.mark()

    # -- containers ---------------------------------------------------------------

    async def create(self, spec: ContainerSpec, create: CreateStep) -> Resources | None:
        """The policy's decision for a new container, made and recorded before the
        runtime creates it (`create`, without the lock), released if the runtime refuses."""
        key = spec.key
        pod = self._cache.pods.get(spec.pod.id)
        if pod is None:  # a pod the engine has not seen run: as the create describes it
            pod = spec.pod
            self._cache.add_pod(pod)
        w = self._workload(key, pod, spec)

        placed: Resources | None = None
        async with self._lock:
            old = self._cache.containers.get(key)
            changed: set[str] = set()
            if old is not None:  # a retried create whose earlier attempt we never saw end
                changed |= self._release(old)
                self._cache.remove_container(key)
            size: tuple[int, int | None] | None = None
            if spec.pod_resources is not None:  # it, or a sibling, may take its size from the pod
                size, others = self._pod_sizes(spec, w)
                changed |= others
                w = _sized(w, size)
            try:
                decision: Decision | None
                decision, w = self._allocate(w, lambda: _sized(self._workload(key, pod, spec, plain=True), size))
            except Exception as e:
                self._sync(changed, f"the policy's failure on {w}")
                self._policy_failed(str(w), e)  # raises under FailClosed
                decision = None
            if decision is not None:
                if decision.warning:
                    self._denied(w, decision.warning)
                record = ContainerRecord(key=key, pod_id=spec.pod.id, name=spec.name, workload=w)
                self._cache.add_container(record)
                linux = _copy(spec.resources)
                if decision.resources is not None:
                    if self._options.dry_run:
                        self._would(w, decision.resources)
                    else:
                        self._placed(w, decision.resources)
                        write_cpuset(linux, decision.resources)
                        self._applied[key] = decision.resources
                        placed = decision.resources
                record.resources = resdict.to_dict(linux)
                self._linux[key] = linux
                changed |= set(decision.others)
        if decision is None:  # fail-open: created as it was asked, not tracked
            await create(None)
            return None
        try:
            container_id = await create(placed)
        except BaseException:
            async with self._lock:
                changed |= self._release(record)
                self._cache.remove_container(key)
                self._sync(changed, f"the runtime's failure to create {w}")
            raise
        async with self._lock:
            if self._cache.containers.get(key) is record:
                self._cache.set_id(key, container_id)
                record.state = "created"
                # Others created concurrently may have changed this one meanwhile.
                changed.add(key)
            self._sync(changed, f"creating {w}")
            self._saves.mark(key)
            self._rearm()
        return placed

    def _allocate(self, w: Workload, plain: Callable[[], Workload]) -> tuple[Decision, Workload]:
        """The policy's decision for `w` (lock held). Should the policy fail on it, the
        container is placed again as its CRI resources alone say (`plain`), with one
        warning, rather than left to run untracked on CPUs another may own exclusively;
        the policy's failure on that too is raised."""
        try:
            return self._decided(w), w
        except Exception as e:
            bare = plain()
            if bare == w:
                raise
            self._counts.policy_errors += 1
            log.warning("policy %s failed on %s (%s: %s); placing it by its CRI resources, without "
                        "its annotations", self._policy_name, w, type(e).__name__, clip(str(e), 160))
            return self._decided(bare), bare

    def _decided(self, w: Workload) -> Decision:
        t0 = time.perf_counter_ns()
        decision = self._policy.allocate(w)
        self._decision_latency.observe_ns(time.perf_counter_ns() - t0)
        self._counts.decisions += 1
        return decision

    def _workload(self, key: str, pod: PodRecord, spec: ContainerSpec, plain: bool = False) -> Workload:
        """The container as the policy sees it; `plain`: by its CRI resources alone."""
        res = spec.resources
        build = classify.plain if plain else classify.workload_or_plain
        return build(
            key=key, namespace=pod.namespace, pod=pod.name, container=spec.name,
            cgroup_parent=pod.cgroup_parent or spec.pod.cgroup_parent,
            pod_annotations=pod.annotations or dict(spec.pod.annotations),
            container_annotations=dict(spec.annotations),
            labels={**(pod.labels or dict(spec.pod.labels)), **spec.labels},
            cri_resources=classify.requirements_from_cri(
                res.cpu_shares, res.cpu_quota, res.cpu_period, res.memory_limit_in_bytes),
            reserved_namespaces=self._options.reserved_namespaces,
            pod_resources=spec.pod_resources)

    def _pod_members(self, pod_id: str, skip: str = "") -> list[podsize.Member]:
        return [podsize.Member(c.key, podsize.own_cpu(podsize.recorded_shares(c.resources)), c.workload.cpu_request,
                               c.workload.cpu_limit)
                for c in self._cache.of_pod(pod_id) if not c.released and c.key != skip]

    def _pod_sizes(self, spec: ContainerSpec, w: Workload) -> tuple[tuple[int, int | None] | None, set[str]]:
        """What a new container takes from its pod (None: it has a request of its own),
        and the keys to sync of its siblings resized because it came (lock held): a second
        container without a request of its own makes the first give up the pod's size,
        one with a request makes the remainder smaller (engine/podsize.py)."""
        assert spec.pod_resources is not None
        own = podsize.own_cpu(spec.resources.cpu_shares)
        members = [*self._pod_members(spec.pod.id, skip=w.key),
                   podsize.Member(w.key, own, w.cpu_request, w.cpu_limit)]
        sized = podsize.sizes(spec.pod_resources, members)
        try:
            changed = self._resize_members(sized, skip=w.key)
        except (ResizeRefused, PolicyFailed) as e:  # a shrink, which fits; said, not raised: the create goes on
            log.warning("%s: its pod's other containers keep their sizes: %s", w, e.message)
            changed = set()
        return sized.get(w.key), changed

    def _resize_members(self, sized: Mapping[str, tuple[int, int | None]], skip: str = "",
                        done: list[tuple[ContainerRecord, Workload, set[str]]] | None = None) -> set[str]:
        """Resizes the containers whose share of their pod changed, through the path of a
        container's resize (lock held); returns the keys to sync. `done`: each resized
        container, its old workload and the others it moved, for a caller to undo."""
        changed: set[str] = set()
        for key, (request, limit) in sized.items():
            c = self._cache.containers.get(key)
            if key == skip or c is None or (c.workload.cpu_request, c.workload.cpu_limit) == (request, limit):
                continue
            change = resize.Resize(dataclasses.replace(c.workload, cpu_request=request, cpu_limit=limit), True)
            decided = self._resized(c, change) if self._policy.resources(key) is not None else set()
            if decided is None:  # the policy failed (fail-open): it keeps its placement and size
                continue
            if done is not None:
                done.append((c, c.workload, decided))
            c.workload = change.workload
            changed |= decided | {key}
        return changed

    async def pod_resized(self, pod_id: str, resources: classify.Requirements | None, send: PodResizeStep) -> None:
        """kubelet's resize of a pod: the container that takes the pod's size is resized
        to the new remainder before the runtime hears of it (a size that cannot be met
        raises `ResizeRefused`, nothing moved, the runtime not called); once the runtime
        took it, the resized container and the others it moved are updated. Should the
        runtime refuse, each gets its old size back, as after a refused container resize."""
        pod = self._cache.pods.get(pod_id)
        if resources is None or pod is None:
            await send()
            return
        done: list[tuple[ContainerRecord, Workload, set[str]]] = []
        async with self._lock:
            # Only a container that took a size from the pod: one that took none is in a pod
            # whose resources are its containers' sum (kubelet sends that on every container's
            # resize, before their updates), or one that has none to give it.
            sized = {key: size for key, size in podsize.sizes(resources, self._pod_members(pod_id)).items()
                     if (c := self._cache.containers.get(key)) is not None
                     and (c.workload.cpu_request, c.workload.cpu_limit) != (0, None)}
            try:
                changed = self._resize_members(sized, done=done)
            except ResizeRefused:
                for c, old, _ in reversed(done):  # a refusal of a later one: the earlier ones go back
                    policy_resize.resize(self._policy, old, self._placed_now)
                    c.workload = old
                raise
        try:
            await send()
        except BaseException:
            for c, old, others in done:
                await self._resize_back(c, old, c.resources, True, others)
            raise
        if done:
            async with self._lock:
                self._sync(changed, f"resizing pod {pod.namespace}/{pod.name}")
                self._saves.mark()

    async def start(self, container_id: str, start: StartStep) -> None:
        """The start is bracketed for the enforcer: an update of this container on
        the wire meanwhile may reach only its spec, and is sent again after (enforce.py)."""
        enforcer = self._enforcer
        if enforcer is not None:
            enforcer.starting(container_id)
        try:
            await start()
        finally:
            if enforcer is not None:
                enforcer.started(container_id)
        c = self._cache.by_id(container_id)
        if c is not None and c.state != "exited":
            c.state = "running"
            if self._classes is not None:  # block I/O and RDT classes, before kubelet hears of the start
                try:
                    await self._classes.started(c)
                except Exception:  # a bug there must not fail the container's start
                    log.exception("%s: enforcing its block I/O and RDT classes failed", c.workload)
            if self._node is not None:  # its scheduling class, on its threads
                try:
                    await self._node.started(c, self._policy)
                except Exception:  # a bug there must not fail the container's start
                    log.exception("%s: enforcing its scheduling class failed", c.workload)

    async def stopped(self, container_id: str) -> None:
        await self._released_by_id(container_id, drop=False)

    async def removed(self, container_id: str) -> None:
        await self._released_by_id(container_id, drop=True)

    async def update(self, container_id: str, linux: pb.LinuxContainerResources | None,
                     send: UpdateStep) -> Resources | None:
        """kubelet's own updates pass, but the fields the policy owns keep its values.
        An update that resizes the container (engine/resize.py) is the policy's to
        re-decide first: the policy's fields are the new cpuset, the other containers
        whose CPUs changed get theirs, and a size that cannot be met raises
        `ResizeRefused` with nothing moved (kubelet shows it in the pod's resize status
        and retries)."""
        c = self._cache.by_id(container_id)
        if c is None or c.released or linux is None:
            await send(None)
            return None
        change = resize.read(c.workload, _memory_only(linux) if _pod_sized(c, linux) else linux)
        changed: set[str] = set()
        old = c.workload
        if change is not None:
            async with self._lock:
                decided: set[str] | None = set()
                if change.decide and self._policy.resources(c.key) is not None:
                    decided = self._resized(c, change)
                if decided is None:  # the policy failed (fail-open): it keeps its placement, the record its size
                    change = None
                else:
                    changed = decided
                    c.workload = change.workload
        current = self._policy.resources(c.key)
        kept = c.resources
        keep: Resources | None = None
        if current is not None:
            merged = dict(c.resources)
            merged.update(resdict.to_dict(linux))
            c.resources = merged
            self._linux.pop(c.key, None)  # the dict is the truth again
            if not self._options.dry_run:
                keep = current
                self._applied[c.key] = current
        try:
            await send(keep)
        except BaseException:
            if change is not None:
                await self._resize_back(c, old, kept, change.decide, changed)
            raise
        if change is not None:
            async with self._lock:
                self._sync(changed, f"resizing {c.workload}")
                self._saves.mark(c.key)
        return keep

    def _resized(self, c: ContainerRecord, change: resize.Resize) -> set[str] | None:
        """The policy's decision for a resized container (lock held); returns the other
        keys to sync. A refusal raises `ResizeRefused`, with nothing changed. A
        policy's failure is handled as on a create: under FailClosed the call fails
        (`PolicyFailed`); else (None) kubelet's update passes with the container's
        placement kept."""
        had = self._policy.resources(c.key)
        try:
            decision = policy_resize.resize(self._policy, change.workload, self._placed_now)
        except ResizeError as e:
            self._counts.resizes_refused += 1
            free = self._policy.usage().exclusive_free
            text = (f"cri-resmgr: cannot resize {c.workload} to {change.describe()}: {e}; "
                    f"free for exclusive use: {free or 'no CPUs'}; it keeps cpuset {had.cpuset_cpus if had else '-'}")
            log.warning("%s", text)
            raise ResizeRefused(text) from None
        # A policy's bug: the policies put the container back first, except balloons resizing
        # one within its own balloon (that hot path keeps no copy to go back to).
        except Exception as e:
            self._counts.policy_errors += 1
            why = clip(str(e), 200)
            if self._options.fail_closed:
                log.error("policy %s failed on resizing %s (fail-closed): %s", self._policy_name, c.workload, why)
                raise PolicyFailed(self._policy_name, why) from None
            log.error("policy %s failed on resizing %s to %s: %s: %s; passing kubelet's update with its "
                      "cpuset kept (fail-open)", self._policy_name, c.workload, change.describe(),
                      type(e).__name__, why)
            return None
        self._counts.resizes += 1
        if decision.resources is not None:
            log.info("%s: resized to %s: %s", change.workload, change.describe(),
                     describe.Placement(self._policy.assignment(c.key), decision.resources))
        return set(decision.others)

    def _placed_now(self) -> list[Workload]:
        """Every container the policy holds, as the cache knows it (for policy/resize.py)."""
        return [r.workload for r in self._cache if not r.released and self._policy.resources(r.key) is not None]

    async def _resize_back(self, c: ContainerRecord, old: Workload, kept: dict[str, Any], decided: bool,
                           changed: set[str]) -> None:
        """The runtime refused a resizing update: the container keeps its old size
        and resources, and the policy its old decision when its CPUs are still free.
        `changed`: the others the resize moved, not told yet (that waited for the reply)."""
        async with self._lock:
            if c.released:
                return
            c.resources = kept
            self._linux.pop(c.key, None)
            if decided and self._policy.resources(c.key) is not None:
                self._applied.pop(c.key, None)  # its cpuset is sent again, whichever size it keeps
                try:
                    decision = policy_resize.resize(self._policy, old, self._placed_now)
                except ResizeError as e:
                    # Its old CPUs were taken meanwhile (a create while the runtime answered):
                    # it keeps the new size, and it and the others it moved are told so, or
                    # it would keep running on CPUs the policy has given away.
                    log.warning("%s: the runtime refused the resize, and its old size cannot be had again: %s; "
                                "it keeps the new size", old, e)
                    self._sync({c.key, *changed}, f"resizing {c.workload} (the runtime refused the update)")
                    self._saves.mark(c.key)
                    return
                self._sync({c.key, *decision.others}, f"the runtime's refusal to resize {old}")
            c.workload = old
            self._saves.mark(c.key)

    def on_exit(self, ids: list[str]) -> Awaitable[None] | None:
        """Containers a reply shows exited: released (the reply's status waits) if
        any still holds what the policy gave it; None (nothing to wait for) if not."""
        if any((c := self._cache.by_id(i)) is not None and not c.released for i in ids):
            return self._released_on_exit(ids)
        return None

    def holding(self, ids: list[str]) -> list[str]:
        """See Core.holding."""
        return [i for i in ids if (c := self._cache.by_id(i)) is not None and not c.released]

    # -- helpers ------------------------------------------------------------------

    async def _released_on_exit(self, ids: list[str]) -> None:
        todo = [i for i in ids if (c := self._cache.by_id(i)) is not None and not c.released]
        if not todo:
            return
        async with self._lock:
            changed: set[str] = set()
            for i in todo:
                c = self._cache.by_id(i)
                if c is not None and not c.released:
                    log.info("container %s (%s) exited: releasing its CPUs", c.workload, i[:12])
                    self._counts.released_on_exit += 1
                    changed |= self._release(c)
            self._sync(changed, "containers exited")
            self._saves.mark()

    async def _released_by_id(self, container_id: str, drop: bool = False) -> None:
        c = self._cache.by_id(container_id)
        if c is None:
            return
        async with self._lock:
            changed = self._release(c)
            if drop:
                self._cache.remove_container(c.key)
                self._applied.pop(c.key, None)
            self._sync(changed, f"{'removing' if drop else 'stopping'} {c.workload}")
            self._saves.mark()

    def _release(self, c: ContainerRecord) -> set[str]:
        """Releases a container's CPUs (lock held); returns the keys whose resources changed."""
        c.state = "exited" if c.id else c.state
        if c.released:
            return set()
        c.released = True
        if self._node is not None and c.id:
            self._node.forget(c.id)  # its RT budget, if it had one
        self._applied.pop(c.key, None)
        self._said.pop(c.key, None)
        self._linux.pop(c.key, None)
        had = self._policy.resources(c.key)
        if had is not None:
            # One line per container end (not per call): the operator sees CPUs come back.
            log.info("%s: released %s%s", c.workload, describe.Placement(self._policy.assignment(c.key), had),
                     " (dry-run)" if self._options.dry_run else "")
        return set(self._policy.release(c.key).others)

    def _sync(self, keys: set[str], cause: str) -> None:
        """Tells the runtime the policy's current resources for these containers (lock
        held); one INFO line says what changed and why (`cause`: "creating NAME"...)."""
        batch = describe.UpdateBatch(cause)
        # Per key only what an update needs: a pool change can name a thousand containers.
        # The log line's collection is skipped when INFO is not written.
        told = batch.add if log.isEnabledFor(logging.INFO) else None
        containers, resources, applied = self._cache.containers, self._policy.resources, self._applied
        dry_run, enforcer = self._options.dry_run, self._enforcer
        # A pool's members share one Resources object before a change and one after it:
        # the last comparison made is kept, with the objects it compared (held, so no other
        # object can be one of them), and a thousand members cost one.
        compared: tuple[Resources | None, Resources | None, bool] = (None, None, False)
        for key in keys:
            c = containers.get(key)
            if c is None or not c.id or c.released:
                continue
            target = resources(key)
            if target is None:
                continue
            last = applied.get(key)
            if last is target:
                continue
            if last is not compared[0] or target is not compared[1]:
                compared = (last, target, last == target)
            if compared[2]:
                continue
            if dry_run:
                self._would(c.workload, target)
                continue
            applied[key] = target
            if enforcer is not None:
                linux = self._changed(c, target)
                self._linux[key] = linux
                enforcer.submit(c.id, linux, c.workload)
            if told is not None:
                told(c.workload, target)
        if batch.count:
            log.info("%s", batch)  # its text only if written
        if self._cpu_classes is not None:  # the CPUs whose class this decision changed get it
            try:
                self._cpu_classes.decided(self._policy, self._cache)
            except Exception:  # a bug there must not fail the decision made
                log.exception("writing the CPU classes failed")
        if self._node is not None:  # the controllable IRQs follow the allocations
            try:
                self._node.irqs(self._policy)
            except Exception:  # a bug there must not fail the decision made
                log.exception("setting the controllable IRQs' affinities failed")

    def _changed(self, c: ContainerRecord, target: Resources) -> pb.LinuxContainerResources:
        """The container's resources as last set, with the policy's fields changed, to
        send; `c.resources` follows. A copy of the message kept from the last change is
        changed, and the dict's cpuset values replaced (cheap); without a kept message
        (after a restart, after kubelet's own update) or when a cpuset key comes or
        goes, the dict is parsed and re-encoded (engine/resdict.py: json_format's), which
        also restores json_format's key order: the state file is what the round trip alone gave."""
        kept = self._linux.get(c.key)
        if kept is not None:
            linux = pb.LinuxContainerResources()
            linux.CopyFrom(kept)
        else:
            linux = resdict.from_dict(c.resources)
        write_cpuset(linux, target)
        fast = _with_cpuset(c.resources, linux) if kept is not None else None
        c.resources = fast if fast is not None else resdict.to_dict(linux)
        return linux

    def _policy_failed(self, who: str, error: Exception) -> None:
        """The policy failed on a new container (lock held): `PolicyFailed` under
        FailClosed; else logged, and the container is created as it was asked."""
        self._counts.policy_errors += 1
        why = clip(str(error), 200)
        if self._options.fail_closed:
            log.error("policy %s failed on %s (fail-closed): %s", self._policy_name, who, why)
            raise PolicyFailed(self._policy_name, why)
        log.error("policy %s failed on %s: %s; forwarding the request unchanged (fail-open)",
                  self._policy_name, who, why)

    def _placed(self, w: Workload, r: Resources) -> None:
        """The decision for a new container, at INFO: the one per-call line above DEBUG."""
        log.info("%s: %s", w, describe.Placement(self._policy.assignment(w.key), r))

    def _denied(self, w: Workload, warning: str) -> None:
        """The policy placed a container without what it asked for (exclusive CPUs, room
        in a balloon...): a warning naming it and a counter."""
        self._counts.exclusive_denied += 1
        log.warning("%s placed without what it asked for: %s", w, warning)

    def _would(self, w: Workload, r: Resources) -> None:
        if self._said.get(w.key) == r:
            return
        self._said[w.key] = r
        where = describe.placement(self._policy.assignment(w.key), r)
        text = f"dry-run: would set {w}: cpuset {r.cpuset_cpus} mems {r.cpuset_mems or '-'} ({where})"
        log.info("%s", text)
        if self._note:
            self._note(text)

    def save_now(self) -> None:
        self._saves.now()

    def retire(self) -> None:
        """Replaced by another manager (policy switch): its pending save must not
        overwrite the successor's state."""
        if self._timer is not None:
            self._timer.cancel()
        self._saves.cancel()

    async def close(self) -> None:
        """Writes what is pending (clean shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
        self._saves.cancel()
        self._saves.now()

    # -- reconcile with the runtime --------------------------------------------------------

    async def reconcile(self, runtime: RuntimePort, later: Later | None = None) -> dict[str, int]:
        """Catches up with what happened behind the relay's back (crictl rm, a wiped
        containerd): containers gone from the runtime release their CPUs, exited ones
        too, and running ones the relay never saw are adopted as at start-up. Costs one
        ListContainers when nothing changed; returns the counts. `later`: runs what the
        caller's reply need not wait for (the NRI plugin's Synchronize: each adopted
        container's log line, after the reply); None: at once."""
        # Only ids known before the list was asked for can be judged missing from it:
        # a container created meanwhile gets its id after the runtime answered.
        known = {c.id for c in self._cache if c.id}
        listed = await runtime.containers()
        present = {c.id for c in listed}
        exited = [c.id for c in listed if c.state == "exited"]
        keys = {c.key for c in self._cache}
        unknown = [c for c in listed if c.state != "exited" and c.id not in known
                   and self._cache.by_id(c.id) is None and c.key not in keys]
        # From a partial listing (an NRI plugin not yet synchronized) absence says nothing.
        gone = known - present if runtime.listing_complete else set()
        if exited:
            await self._released_on_exit(exited)
        new = await adopt.unknown_containers(runtime, self._cache, unknown, self._options.reserved_namespaces) \
            if unknown else []
        resent = await self._check_real(runtime, [c.id for c in listed if c.state == "running"])
        if not gone and not new:
            return {"gone": 0, "adopted": 0, "resent": resent}
        adopted = 0
        lines: list[ContainerRecord] = []  # adopted ones, for their log lines
        async with self._lock:
            changed: set[str] = set()
            for cid in gone:
                c = self._cache.by_id(cid)
                if c is None:
                    continue  # removed through the relay meanwhile
                log.info("%s (%s) was removed behind the relay's back: releasing its CPUs", c.workload, cid[:12])
                changed |= self._release(c)
                self._cache.remove_container(c.key)
            for record in new:
                if record.key in self._cache.containers:
                    continue  # created through the relay while we asked about it
                changed |= self._adopt(record, lines)
                adopted += 1
            self._sync(changed, "reconciling with the runtime")
            self._saves.mark()
            self._rearm()
        if lines:
            (later or _now)(lambda: self._adopted_lines(lines))
        return {"gone": len(gone), "adopted": adopted, "resent": resent}

    async def _check_real(self, runtime: RuntimePort, running: list[str]) -> int:
        """Sends again the policy's cpuset to running containers whose cgroup holds
        another (realcpuset.py: an update that raced a start the relay did not see
        end, or one the runtime took into the spec only); returns how many. Each
        container's pid is asked for once (the runtime's detail of it); the cgroup
        files are read off the event loop."""
        if self._cgroups is None or self._enforcer is None or self._options.dry_run:
            return 0
        enforcer = self._enforcer
        live = set(running)
        for cid in [cid for cid in self._pids if cid not in live]:
            del self._pids[cid]
        for key in [key for key in self._resent if (c := self._cache.containers.get(key)) is None or c.id not in live]:
            del self._resent[key]
        for key in [k for k in self._narrowed if (c := self._cache.containers.get(k)) is None or c.id not in live]:
            del self._narrowed[key]
        todo: list[tuple[str, int]] = []
        for cid in running:
            c = self._cache.by_id(cid)
            if c is None or c.released or enforcer.busy(cid) or self._policy.resources(c.key) is None:
                continue
            pid = self._pids.get(cid)
            if pid is None:
                try:
                    pid = self._pids[cid] = (await runtime.container_detail(cid)).pid
                except RuntimeFailure:
                    continue  # gone meanwhile, or the runtime is away: the next round asks again
            if pid:
                todo.append((cid, pid))
        if not todo:
            return 0
        reader = self._cgroups
        real = await asyncio.to_thread(lambda: [(cid, reader.read(pid, cid)) for cid, pid in todo])
        resent = 0
        async with self._lock:
            for cid, got in real:
                c = self._cache.by_id(cid)
                if got is None or c is None or c.released or enforcer.busy(cid):
                    continue  # unknown, gone, or changing: nothing to judge by
                target = self._policy.resources(c.key)
                if target is None or _matches(got, target):
                    self._resent.pop(c.key, None)
                    if target is not None:
                        self._judge_enforced(c, got, target)
                    continue
                seen = self._resent.get(c.key)
                if seen is not None and seen[:2] == (target, got):
                    if not seen[2]:  # sent again already, and still so: said once, not sent every round
                        log.warning("%s (%s) still runs on CPUs %s in its cgroup after its cpuset %s was sent "
                                    "again; leaving it", c.workload, cid[:12], got.cpus, target.cpuset_cpus)
                        self._resent[c.key] = (target, got, True)
                    continue
                self._resent[c.key] = (target, got, False)
                log.warning("%s (%s) runs on CPUs %s, mems %s in its cgroup, not the policy's %s, mems %s: "
                            "sending its cpuset again", c.workload, cid[:12], got.cpus,
                            got.mems if got.mems is not None else "?", target.cpuset_cpus, target.cpuset_mems or "-")
                self._applied[c.key] = target
                linux = self._changed(c, target)
                self._linux[c.key] = linux
                enforcer.submit(cid, linux, c.workload)
                resent += 1
        return resent

    def _judge_enforced(self, c: ContainerRecord, got: realcpuset.RealCpuset, target: Resources) -> None:
        """`c`'s cgroup holds the policy's cpuset: whether the kernel enforces it (lock held).
        Narrowed by an ancestor, sending the cpuset again changes nothing (the kernel keeps a
        child within its parent): said once per (wanted, enforced) pair, kept for /state."""
        if got.effective is None or got.enforced == target.cpuset_cpus:
            if self._narrowed.pop(c.key, None) is not None:
                log.info("%s (%s) runs on its CPUs %s again", c.workload, c.id[:12], target.cpuset_cpus)
            return
        was = self._narrowed.get(c.key)
        self._narrowed[c.key] = got
        if was is None or (was.enforced, was.cpus, was.narrowed_by) != (got.enforced, got.cpus, got.narrowed_by):
            log.warning("%s", _narrowed_line(c, got, target))

    def narrowed(self, key: str) -> realcpuset.RealCpuset | None:
        """What the kernel enforces of a container whose cpuset a parent cgroup narrows (None: not so)."""
        return self._narrowed.get(key)

    def _adopt(self, record: ContainerRecord, lines: list[ContainerRecord]) -> set[str]:
        """Places a running container the relay did not know (lock held); returns the keys
        to sync. It goes to `lines` for its log line (`_adopted_lines`)."""
        w = record.workload
        try:
            decision, record.workload = self._allocate(w, lambda: dataclasses.replace(
                w, pod_annotations={}, container_annotations={}))
        except Exception as e:  # one odd container must not stop the reconcile
            self._counts.policy_errors += 1
            log.error("policy %s failed on adopting %s: %s: %s", self._policy_name, record.workload,
                      type(e).__name__, clip(str(e), 160))
            return set()
        self._cache.add_container(record)
        if decision.warning:
            self._denied(record.workload, decision.warning)
        if decision.resources is not None and not self._options.dry_run:
            lines.append(record)
        return {record.key} | set(decision.others)

    def _adopted_lines(self, adopted: list[ContainerRecord]) -> None:
        """One INFO line per adopted container, with what it holds now: the cpuset the
        reconcile's updates gave it (a container adopted early shares a pool the later
        ones shrank). Not under the lock: the policy's answers are plain reads."""
        for c in adopted:
            r = self._policy.resources(c.key)
            if r is not None and not c.released:
                log.info("adopted %s (%s): %s", c.workload, c.id[:12],
                         describe.Placement(self._policy.assignment(c.key), r))

    # -- start-up and reconfiguration --------------------------------------------------

    def restore(self, saved_assignments: Mapping[str, Assignment] | None, live: bool = False) -> None:
        """Places every live container in the cache with the policy (at start-up
        or after a switch) and sends each its resources. `live`: the assignments are
        those of the manager this one replaces (Policy.restore may refuse then)."""
        items = []
        for c in self._cache:
            if c.released or c.state == "exited":
                continue
            a = saved_assignments.get(c.key) if saved_assignments is not None else None
            items.append((c.workload, a))
        decision = self._policy.restore(items, live=live)
        for w, was in items:
            # "restored": as saved; "adopted": found running with nothing saved for it (new to the
            # relay or plugin); "re-placed": a live reconfiguration (a policy switch) placed it anew.
            verb = "re-placed" if live else "restored" if was is not None else "adopted"
            # The policy's warnings name each container with its short key in parentheses.
            if decision.warning and f"({w.short_key})" in decision.warning:
                self._denied(w, "not enough free CPUs " + (
                    "when the new configuration placed it" if live else
                    "to restore its saved allocation" if was is not None else "when it was adopted"))
            r = self._policy.resources(w.key)
            if r is not None:
                log.info("%s %s: %s", verb, w, describe.Placement(self._policy.assignment(w.key), r))
        self._applied.clear()
        self._said.clear()
        self._sync(set(decision.others), "restoring the allocations")
        self.save_now()  # before serving: the file on disk matches what is in force
        self._rearm()

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.rearm()

    async def _on_timer(self) -> None:
        """The policy's deadline has come (timers.py): apply what it decides then."""
        async with self._lock:
            decision = self._policy.expire(time.time())  # type: ignore[attr-defined]
            for key in decision.others:
                c = self._cache.containers.get(key)
                if c is not None:
                    log.info("%s: %s (timer)", c.workload,
                             describe.Placement(self._policy.assignment(key), decision.others[key]))
            self._sync(set(decision.others), "the policy's timer")
            self._saves.mark()
            self._rearm()


# Runs work a caller's reply need not wait for (ResourceManager.reconcile).
Later = Callable[[Callable[[], None]], None]


def _now(work: Callable[[], None]) -> None:
    work()


def _sized(w: Workload, size: tuple[int, int | None] | None) -> Workload:
    """`w` with the CPU request and limit it takes from its pod (None: its own)."""
    if size is None:
        return w
    return dataclasses.replace(w, cpu_request=size[0], cpu_limit=size[1])


def _pod_sized(c: ContainerRecord, linux: pb.LinuxContainerResources) -> bool:
    """Whether a container's size is its pod's (no CPU request of its own, before and
    in kubelet's update): kubelet's minimum shares then say nothing of its CPUs."""
    return not podsize.own_cpu(linux.cpu_shares) and not podsize.own_cpu(podsize.recorded_shares(c.resources))


def _memory_only(linux: pb.LinuxContainerResources) -> pb.LinuxContainerResources:
    """kubelet's update without its CPU fields, for reading a size (engine/resize.py)."""
    out = pb.LinuxContainerResources(memory_limit_in_bytes=linux.memory_limit_in_bytes)
    return out


def _narrowed_line(c: ContainerRecord, got: realcpuset.RealCpuset, target: Resources) -> str:
    where = got.narrowed_by or "?"
    if where == "/":  # the root's effective set is the online CPUs
        return (f"{c.workload} ({c.id[:12]}) runs on CPUs {got.enforced} only, not the policy's "
                f"{target.cpuset_cpus}: its cgroup holds {got.cpus} but the root cgroup has only {got.enforced} of "
                "them (CPUs offline)")
    return (f"{c.workload} ({c.id[:12]}) runs on CPUs {got.enforced} only, not the policy's {target.cpuset_cpus}: "
            f"its cgroup holds {got.cpus} but the kernel narrows it to what cgroup {where} allows (its effective "
            "cpuset); the relay does not write cgroups it does not own: widen that cgroup's cpuset.cpus to put it "
            "right")


def _matches(real: realcpuset.RealCpuset, target: Resources) -> bool:
    """Whether a container's cgroup holds what the policy gave it (memory nodes only
    when the policy sets them and the cgroup's could be read)."""
    if real.cpus != target.cpuset_cpus:
        return False
    if target.cpuset_mems is None or real.mems is None:
        return True
    try:
        return real.mems == CPUSet.parse(target.cpuset_mems)
    except ValueError:
        return True  # not a list we can compare: the runtime took it as it is


def _copy(linux: pb.LinuxContainerResources) -> pb.LinuxContainerResources:
    out = pb.LinuxContainerResources()
    out.CopyFrom(linux)
    out.DiscardUnknownFields()  # as a parse of the saved dict would have it
    return out


# The cpuset fields of LinuxContainerResources, as json_format names them.
_CPUSET_FIELDS = ("cpuset_cpus", "cpuset_mems")


def _with_cpuset(saved: Mapping[str, Any], linux: pb.LinuxContainerResources) -> dict[str, Any] | None:
    """`saved` (json_format's dict of a message, in its key order) with the cpuset
    values of `linux`: what MessageToDict(linux) gives when `linux` is `saved` parsed
    with only its cpuset changed. None when a cpuset key would come or go (json_format
    leaves empty strings out): its place in the order is json_format's to give."""
    out = dict(saved)
    for name in _CPUSET_FIELDS:
        value = getattr(linux, name)
        if bool(value) != (name in out):
            return None
        if value:
            out[name] = value
    return out
