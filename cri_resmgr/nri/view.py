"""The runtime as the NRI plugin knows it: the engine's runtime port under NRI.

The engine adopts, reconciles and enforces through its runtime port
(`engine.runtime.RuntimePort`). Under NRI there is no CRI channel: the runtime
tells the plugin its pods and containers (Synchronize, then each event), and takes
container updates either in a hook's reply or unsolicited (UpdateContainers).
`NriRuntime` keeps that state and answers the port from it: pods, containers, a
container's resources, pid and cgroups path, and the runtime's version as NRI
reported them; an update becomes an NRI `ContainerUpdate`, collected into the reply
of the hook being answered (`collect`/`collected`), kept for a container whose
creation or start is in flight until it has started (`launching`/`started`), or
sent with UpdateContainers when no call of the runtime's is in flight (`delivery.py`).
A container's attempt and its resources in the engine's record
form (`attempt`, `cri_resources`) serve the hooks too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.runtime import (
    DEFAULT_TIMEOUT,
    ContainerDetail,
    ContainerInfo,
    ContainerPhase,
    NotFound,
    PodInfo,
    RuntimeVersion,
    Unavailable,
)
from cri_resmgr.nri.delivery import Delivery, SendUpdates

# How long a container may take from its CreateContainer to its PostStartContainer before
# updates owed to it are sent anyway (a start lost to a reconnection, a runtime that skips it).
LAUNCH_LIMIT = 20.0

log = logging.getLogger(__name__)

RESTART_COUNT = "io.kubernetes.container.restartCount"  # kubelet's container annotation

_STATES: dict[int, ContainerPhase] = {
    api.CONTAINER_CREATED: "created",
    api.CONTAINER_RUNNING: "running",
    api.CONTAINER_PAUSED: "running",
    api.CONTAINER_STOPPED: "exited",
}


def attempt(c: api.Container) -> int:
    try:
        return int(c.annotations.get(RESTART_COUNT, "0"))
    except ValueError:
        return 0


def cri_resources(r: api.LinuxResources) -> pb.LinuxContainerResources:
    """NRI's LinuxResources as CRI's LinuxContainerResources (the fields the engine reads)."""
    cpu = r.cpu
    return pb.LinuxContainerResources(
        cpu_period=cpu.period.value, cpu_quota=max(cpu.quota.value, 0), cpu_shares=cpu.shares.value,
        memory_limit_in_bytes=max(r.memory.limit.value, 0), cpuset_cpus=cpu.cpus, cpuset_mems=cpu.mems)




def cpuset_update(container_id: str, linux: pb.LinuxContainerResources) -> api.ContainerUpdate:
    """An update of the fields a policy owns: the cpuset's CPUs and memory nodes."""
    update = api.ContainerUpdate(container_id=container_id)
    cpu = update.linux.resources.cpu  # set in place: nested constructors copy each level
    cpu.cpus, cpu.mems = linux.cpuset_cpus, linux.cpuset_mems
    return update


def container_info(c: api.Container) -> ContainerInfo:
    return ContainerInfo(id=c.id, pod_id=c.pod_sandbox_id, name=c.name, attempt=attempt(c),
                         state=_STATES.get(c.state, "unknown"), annotations=dict(c.annotations),
                         labels=dict(c.labels))


class NriRuntime:
    """The runtime's pods and containers as NRI reported them; an
    `engine.runtime.RuntimePort`."""

    def __init__(self, socket: str):
        self._path = socket
        self._pods: dict[str, api.PodSandbox] = {}
        self.stopped_pods: set[str] = set()
        self._containers: dict[str, api.Container] = {}
        self.runtime_name = ""
        self.runtime_version = ""
        # UpdateContainers, never while a call of the runtime's is in flight (delivery.py).
        self.delivery = Delivery()
        self._collecting: dict[str, api.ContainerUpdate] | None = None
        # False until the runtime's Synchronize of this session: then a container the
        # view does not know may still run (RuntimePort.listing_complete).
        self.listing_complete = False
        # Updates for containers the view has not heard of while it is partial: held
        # until a Synchronize says whether they exist (`synchronize`), or sent with
        # UpdateContainers when none comes (`release_deferred`).
        self._deferred: dict[str, api.ContainerUpdate] = {}
        # Whether such updates are held (until `release_deferred`: then, with no Synchronize
        # to wait for, each is sent alone with UpdateContainers).
        self._holding = True
        # Containers whose creation or start is in flight (from their CreateContainer to
        # their PostStartContainer) -> the update owed to each (None: none yet). containerd
        # applies an update to nothing while it creates a container and to its spec only
        # until its task has started, so such an update is sent once it has started.
        self._launching: dict[str, api.ContainerUpdate | None] = {}
        self._launch_timers: dict[str, asyncio.TimerHandle] = {}
        self.sent_after_start = 0  # updates owed to a launching container, sent after its start

    @property
    def path(self) -> str:
        return f"NRI socket {self._path}"

    # -- the connection --------------------------------------------------------------

    def connected(self, send: SendUpdates, runtime_name: str = "", runtime_version: str = "") -> None:
        self.delivery.connected(send)
        self.runtime_name, self.runtime_version = runtime_name, runtime_version

    def disconnected(self) -> None:
        self.delivery.disconnected()

    @property
    def up(self) -> bool:
        return self.delivery.up

    # -- what NRI reports --------------------------------------------------------------

    def configured(self) -> None:
        """A new session: partial until its Synchronize (which may never come)."""
        self.listing_complete = False
        self._holding = True

    def synchronize(self, pods: Iterable[api.PodSandbox], containers: Iterable[api.Container]) -> None:
        """Everything the runtime has now; what we knew before is forgotten. Deferred
        updates of containers it names go with the next reply; the others are gone."""
        self._pods = {p.id: p for p in pods}
        self.stopped_pods = set()
        self._containers = {c.id: c for c in containers}
        self.listing_complete = True
        deferred, self._deferred = self._deferred, {}
        carried = [u for cid, u in deferred.items() if cid in self._containers]
        # A container still being created or started stays so; one that runs now gets
        # what it was owed (the Synchronize's reply takes carried updates).
        for cid in list(self._launching):
            c = self._containers.get(cid)
            if c is None or c.state != api.CONTAINER_CREATED:
                owed = self._landed(cid)
                if owed is not None and c is not None:
                    carried.append(owed)
        # One listed as created whose CreateContainer this plugin never saw (created while
        # it was away, or before it started) may have its start in flight just as well:
        # its updates wait for its start too, else containerd puts them in its spec only.
        for cid, c in self._containers.items():
            if c.state == api.CONTAINER_CREATED and cid not in self._launching:
                self.launching(cid)
        self.delivery.carry(carried)

    def release_deferred(self) -> list[api.ContainerUpdate]:
        """No Synchronize came: the deferred updates, to send with UpdateContainers;
        later ones of containers the view has not heard of are sent at once."""
        self._holding = False
        deferred, self._deferred = self._deferred, {}
        return list(deferred.values())

    def knows(self, container_id: str) -> bool:
        return container_id in self._containers

    def pod(self, p: api.PodSandbox) -> None:
        if p.id:
            self._pods[p.id] = p

    def pod_stopped(self, p: api.PodSandbox) -> None:
        self.pod(p)
        self.stopped_pods.add(p.id)

    def pod_removed(self, pod_id: str) -> None:
        self._pods.pop(pod_id, None)
        self.stopped_pods.discard(pod_id)
        for cid in [c.id for c in self._containers.values() if c.pod_sandbox_id == pod_id]:
            self.container_removed(cid)

    def pod_containers(self, pod_id: str) -> list[str]:
        return [c.id for c in self._containers.values() if c.pod_sandbox_id == pod_id]

    def container(self, c: api.Container, state: int | None = None) -> None:
        if not c.id:
            return
        copy = api.Container()
        copy.CopyFrom(c)
        if state is not None:
            copy.state = state  # type: ignore[assignment]
        self._containers[c.id] = copy

    def container_removed(self, container_id: str) -> None:
        self._containers.pop(container_id, None)
        self._landed(container_id)
        self.delivery.forget([container_id])

    # -- containers being created or started ---------------------------------------------

    def launching(self, container_id: str) -> None:
        """Its CreateContainer: until its PostStartContainer, updates decided for it wait
        (`started`). A runtime that never reports the start (a lost event) gets them after
        LAUNCH_LIMIT, to its spec at worst, which the periodic reconcile checks."""
        if not container_id:
            return
        self._landed(container_id)
        self._launching[container_id] = None
        self._launch_timers[container_id] = asyncio.get_running_loop().call_later(
            LAUNCH_LIMIT, self._launch_expired, container_id)

    def is_launching(self, container_id: str) -> bool:
        return container_id in self._launching

    def started(self, container_id: str) -> None:
        """Its PostStartContainer: the task runs, so an update reaches its cgroup now. What
        was decided for it meanwhile goes out with UpdateContainers after this event's reply."""
        owed = self._landed(container_id)
        if owed is not None:
            self.sent_after_start += 1
            log.info("container %s: update decided while its creation or start was in flight; "
                     "sending it now that it has started (cpuset %s)", container_id[:12],
                     owed.linux.resources.cpu.cpus)
            self.delivery.queue([owed], urgent=True)

    def stopped(self, container_id: str) -> None:
        """Its start failed, it is being stopped or it ended: nothing owed to it any more,
        and nothing more is sent to it (`update`). containerd applies an update of a
        stopping container as of a running one (the task's update, under the container's
        lock) while its exit is handled, and a StopContainer reply's updates under its
        NRI lock: an update there only adds to what the runtime holds for nothing."""
        self._landed(container_id)
        c = self._containers.get(container_id)
        if c is not None:
            c.state = api.CONTAINER_STOPPED
        self.delivery.forget([container_id])
        if self._collecting is not None:
            self._collecting.pop(container_id, None)

    def is_stopped(self, container_id: str) -> bool:
        c = self._containers.get(container_id)
        return c is not None and c.state == api.CONTAINER_STOPPED

    def _launch_expired(self, container_id: str) -> None:
        self._launch_timers.pop(container_id, None)
        if container_id in self._launching:
            log.warning("container %s: no PostStartContainer within %gs of its CreateContainer; "
                        "its updates are sent as they come", container_id[:12], LAUNCH_LIMIT)
            owed = self._launching.pop(container_id)
            if owed is not None:
                self.delivery.queue([owed], urgent=True)

    def _landed(self, container_id: str) -> api.ContainerUpdate | None:
        """No longer launching; the update owed to it, if any."""
        timer = self._launch_timers.pop(container_id, None)
        if timer is not None:
            timer.cancel()
        return self._launching.pop(container_id, None)

    # -- updates -------------------------------------------------------------------------

    def collect(self) -> None:
        """From now until `collected`, updates are kept for the reply of the hook being
        answered, with those carried or queued for such a reply (`Delivery.take`)."""
        self._collecting = self.delivery.take()

    def collected(self) -> list[api.ContainerUpdate]:
        updates, self._collecting = self._collecting, None
        return [u for u in updates.values() if not self.is_stopped(u.container_id)] if updates else []

    def carry(self, updates: list[api.ContainerUpdate]) -> None:
        """Updates a hook whose reply carries none caused: for the next reply that can."""
        self.delivery.carry(u for u in updates if not self.is_stopped(u.container_id))

    async def update(self, container_id: str, resources: pb.LinuxContainerResources,
                     timeout: float = DEFAULT_TIMEOUT) -> None:
        """The port's update: its cpuset, in the reply of the hook being answered, else
        with UpdateContainers (held while the view is partial: see `synchronize`; owed
        to a container whose creation or start is in flight: see `launching`). Not
        waited for: the runtime may hold an UpdateContainers until a hook ends, and a
        hook may be waiting for this (Delivery); the runtime's failures are logged."""
        cid = container_id
        update = cpuset_update(cid, resources)
        if cid not in self._containers:
            if self.listing_complete:
                raise NotFound(f"container {cid} is not known to the runtime")
            if self._holding:
                self._deferred[cid] = update  # the runtime may well have it: see `synchronize`
                return
            # No Synchronize is coming: sent alone, as the runtime may have it, never in a
            # hook's reply (one it does not have could fail the runtime's call).
            self._queue(update, alone=True)
            return
        if self.is_stopped(cid):
            log.debug("container %s is stopping or stopped: its update is not sent", cid[:12])
            return
        if cid in self._launching:
            self._launching[cid] = update
            return
        if self._collecting is not None:
            self._collecting[cid] = update
            return
        self._queue(update)

    def _queue(self, update: api.ContainerUpdate, alone: bool = False) -> None:
        if not self.delivery.up:
            raise Unavailable("not connected to the runtime's NRI socket")
        self.delivery.queue([update], alone=alone)

    def push(self, updates: list[api.ContainerUpdate], alone: bool = False) -> None:
        """Updates decided outside a hook's reply (a decision that missed its hook, held
        ones released): with UpdateContainers as soon as nothing is in flight (a new
        container may be on another's CPUs meanwhile), or owed to a container still starting."""
        for u in updates:
            if self.is_stopped(u.container_id):
                continue
            if u.container_id in self._launching:
                self._launching[u.container_id] = u
            else:
                self.delivery.queue([u], alone=alone, urgent=True)

    def after_reply(self, work: Callable[[], None]) -> None:
        """`work` right after the replies in flight have been written (at once when none
        is): what a hook's reply need not wait for (`Delivery.after_reply`)."""
        self.delivery.after_reply(work)

    async def drained(self) -> None:
        """Until the updates queued or carried so far have been sent."""
        await self.delivery.drained()

    # -- the rest of the engine's runtime port -------------------------------------------

    async def version(self, timeout: float = DEFAULT_TIMEOUT) -> RuntimeVersion:
        if not self.up:
            raise Unavailable("not connected to the runtime's NRI socket")
        return RuntimeVersion(name=self.runtime_name or "NRI", version=self.runtime_version, api_version="NRI")

    async def pods(self, timeout: float = DEFAULT_TIMEOUT) -> list[PodInfo]:
        return [self._as_info(p) for p in self._pods.values()]

    async def pod_info(self, pod_id: str, timeout: float = DEFAULT_TIMEOUT) -> PodInfo:
        p = self._pods.get(pod_id)
        if p is None:
            raise NotFound(f"pod {pod_id} is not known to the runtime")
        return self._as_info(p)

    async def containers(self, timeout: float = DEFAULT_TIMEOUT) -> list[ContainerInfo]:
        return [container_info(c) for c in self._containers.values()]

    async def container_detail(self, container_id: str, timeout: float = DEFAULT_TIMEOUT) -> ContainerDetail:
        c = self._containers.get(container_id)
        if c is None:
            raise NotFound(f"container {container_id} is not known to the runtime")
        # The pid: the reconcile reads the real cpuset from the process's cgroup
        # (engine/realcpuset.py), which the spec cannot show; the cgroups path is where
        # the engine's block I/O and RDT classes go (engine/classes.py).
        return ContainerDetail(resources=cri_resources(c.linux.resources), pid=max(c.pid, 0),
                               cgroups_path=c.linux.cgroups_path)

    def _as_info(self, p: api.PodSandbox) -> PodInfo:
        return PodInfo(id=p.id, name=p.name, namespace=p.namespace, uid=p.uid, ready=p.id not in self.stopped_pods,
                       cgroup_parent=p.linux.cgroup_parent, annotations=dict(p.annotations), labels=dict(p.labels))
