"""The runtime as the NRI plugin knows it: the engine's runtime port under NRI.

The engine adopts, reconciles and enforces through its runtime port
(`engine.runtime.RuntimePort`). Under NRI there is no CRI channel: the runtime
tells the plugin its pods and containers (Synchronize, then each event), and takes
container updates either in a hook's reply or unsolicited (UpdateContainers).
`NriRuntime` keeps that state and answers the port from it: pods, containers, a
container's resources, pid and cgroups path, and the runtime's version as NRI
reported them; an update becomes an NRI `ContainerUpdate`, collected into the reply
of the hook being answered (`collect`/`collected`) or sent with UpdateContainers
when no hook is. A container's attempt and its resources in the engine's record
form (`attempt`, `cri_resources`) serve the hooks too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.runtime import (
    DEFAULT_TIMEOUT,
    ContainerDetail,
    ContainerInfo,
    ContainerPhase,
    NotFound,
    PodInfo,
    RuntimeFailure,
    RuntimeVersion,
    Unavailable,
)

log = logging.getLogger(__name__)

RESTART_COUNT = "io.kubernetes.container.restartCount"  # kubelet's container annotation

_STATES: dict[int, ContainerPhase] = {
    api.CONTAINER_CREATED: "created",
    api.CONTAINER_RUNNING: "running",
    api.CONTAINER_PAUSED: "running",
    api.CONTAINER_STOPPED: "exited",
}

# Sends updates with UpdateContainers; returns the ones the runtime failed.
SendUpdates = Callable[[list[api.ContainerUpdate]], Awaitable[list[api.ContainerUpdate]]]


def attempt(c: api.Container) -> int:
    try:
        return int(c.annotations.get(RESTART_COUNT, "0"))
    except ValueError:
        return 0


def cri_resources(r: api.LinuxResources) -> pb.LinuxContainerResources:
    """NRI's LinuxResources as CRI's LinuxContainerResources (the fields the engine reads)."""
    return pb.LinuxContainerResources(
        cpu_period=r.cpu.period.value, cpu_quota=max(r.cpu.quota.value, 0), cpu_shares=r.cpu.shares.value,
        memory_limit_in_bytes=max(r.memory.limit.value, 0), cpuset_cpus=r.cpu.cpus, cpuset_mems=r.cpu.mems)




def cpuset_update(container_id: str, linux: pb.LinuxContainerResources) -> api.ContainerUpdate:
    """An update of the fields a policy owns: the cpuset's CPUs and memory nodes."""
    cpu = api.LinuxCPU(cpus=linux.cpuset_cpus, mems=linux.cpuset_mems)
    return api.ContainerUpdate(container_id=container_id,
                               linux=api.LinuxContainerUpdate(resources=api.LinuxResources(cpu=cpu)))


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
        self._send: SendUpdates | None = None
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
        # Updates waiting for the next hook's reply (deferred ones a Synchronize confirmed).
        self._carry: dict[str, api.ContainerUpdate] = {}
        # Updates of containers the view has not heard of, made during a hook once nothing
        # is held: sent with UpdateContainers after the hook's reply, not in it.
        self._after_hook: dict[str, api.ContainerUpdate] = {}
        self._pushing: set[asyncio.Future[None]] = set()  # held until done: the loop keeps weak references

    @property
    def path(self) -> str:
        return f"NRI socket {self._path}"

    # -- the connection --------------------------------------------------------------

    def connected(self, send: SendUpdates, runtime_name: str = "", runtime_version: str = "") -> None:
        self._send = send
        self.runtime_name, self.runtime_version = runtime_name, runtime_version

    def disconnected(self) -> None:
        self._send = None

    @property
    def up(self) -> bool:
        return self._send is not None

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
        self._carry.update({cid: u for cid, u in deferred.items() if cid in self._containers})

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
            del self._containers[cid]

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

    # -- updates -------------------------------------------------------------------------

    def collect(self) -> None:
        """From now until `collected`, updates are kept for the reply of the hook being answered."""
        self._collecting, self._carry = self._carry, {}

    def collected(self) -> list[api.ContainerUpdate]:
        updates, self._collecting = self._collecting, None
        after, self._after_hook = self._after_hook, {}
        if after:
            task = asyncio.ensure_future(self.push(list(after.values())))
            self._pushing.add(task)
            task.add_done_callback(self._pushing.discard)
        return list(updates.values()) if updates else []

    async def update(self, container_id: str, resources: pb.LinuxContainerResources,
                     timeout: float = DEFAULT_TIMEOUT) -> None:
        """The port's update: its cpuset, in the reply of the hook being answered, else
        with UpdateContainers (held while the view is partial: see `synchronize`)."""
        cid = container_id
        update = cpuset_update(cid, resources)
        if cid not in self._containers:
            if self.listing_complete:
                raise NotFound(f"container {cid} is not known to the runtime")
            if self._holding:
                self._deferred[cid] = update  # the runtime may well have it: see `synchronize`
                return
            # No Synchronize is coming: sent alone, as the runtime may have it, never in a
            # hook's reply (one it does not have could fail the runtime's call); during a
            # hook, right after its reply, as a late decision's are (hooks.Hooks._late).
            if self._collecting is not None:
                self._after_hook[cid] = update
                return
            await self._send_alone(cid, update, NotFound)
            return
        if self._collecting is not None:
            self._collecting[cid] = update
            return
        await self._send_alone(cid, update, RuntimeFailure)

    async def _send_alone(self, cid: str, update: api.ContainerUpdate, failed: type[RuntimeFailure]) -> None:
        if self._send is None:
            raise Unavailable("not connected to the runtime's NRI socket")
        try:
            refused = await self._send([update])
        except Exception as e:  # the ttRPC call's failure, as the engine understands one
            raise Unavailable(f"UpdateContainers: {e}") from None
        if refused:
            raise failed(f"the runtime failed to update container {cid}")

    async def push(self, updates: list[api.ContainerUpdate]) -> None:
        """Sends updates with UpdateContainers now (a decision that missed its hook); logged, not raised."""
        if self._send is None:
            log.error("%d container updates lost: not connected to the runtime", len(updates))
            return
        try:
            failed = await self._send(updates)
        except Exception as e:  # logged: a later reconcile or decision sends them again
            log.error("UpdateContainers failed: %s", e)
            return
        for u in failed:
            log.error("the runtime failed to update container %s", u.container_id)

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
