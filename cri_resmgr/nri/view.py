"""The runtime as the NRI plugin knows it, answering the engine's CRI calls.

The engine adopts, reconciles and enforces through typed CRI calls
(`engine.runtime.RuntimeCalls`). Under NRI there is no CRI channel: the runtime
tells the plugin its pods and containers (Synchronize, then each event), and takes
container updates either in a hook's reply or unsolicited (UpdateContainers).
`NriRuntime` keeps that state and answers the engine's calls from it:
ListPodSandbox, PodSandboxStatus, ListContainers, ContainerStatus and Version from
what NRI reported; UpdateContainerResources becomes an NRI `ContainerUpdate`,
collected into the reply of the hook being answered (`collect`/`collected`) or
sent with UpdateContainers when no hook is.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)

RESTART_COUNT = "io.kubernetes.container.restartCount"  # kubelet's container annotation

_STATES = {
    api.CONTAINER_CREATED: pb.CONTAINER_CREATED,
    api.CONTAINER_RUNNING: pb.CONTAINER_RUNNING,
    api.CONTAINER_PAUSED: pb.CONTAINER_RUNNING,
    api.CONTAINER_STOPPED: pb.CONTAINER_EXITED,
}

# Sends updates with UpdateContainers; returns the ones the runtime failed.
SendUpdates = Callable[[list[api.ContainerUpdate]], Awaitable[list[api.ContainerUpdate]]]


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """The error the engine handles from a runtime call."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


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


def cri_container(c: api.Container) -> pb.Container:
    return pb.Container(id=c.id, pod_sandbox_id=c.pod_sandbox_id,
                        metadata=pb.ContainerMetadata(name=c.name, attempt=attempt(c)),
                        state=_STATES.get(c.state, pb.CONTAINER_UNKNOWN),
                        labels=dict(c.labels), annotations=dict(c.annotations))


def cpuset_update(container_id: str, linux: pb.LinuxContainerResources) -> api.ContainerUpdate:
    """An update of the fields a policy owns: the cpuset's CPUs and memory nodes."""
    cpu = api.LinuxCPU(cpus=linux.cpuset_cpus, mems=linux.cpuset_mems)
    return api.ContainerUpdate(container_id=container_id,
                               linux=api.LinuxContainerUpdate(resources=api.LinuxResources(cpu=cpu)))


class NriRuntime:
    """The runtime's pods and containers as NRI reported them; an
    `engine.runtime.RuntimeCalls`."""

    def __init__(self, socket: str):
        self._path = socket
        self.pods: dict[str, api.PodSandbox] = {}
        self.stopped_pods: set[str] = set()
        self.containers: dict[str, api.Container] = {}
        self.runtime_name = ""
        self.runtime_version = ""
        self._send: SendUpdates | None = None
        self._collecting: dict[str, api.ContainerUpdate] | None = None
        # False until the runtime's Synchronize of this session: then a container the
        # view does not know may still run (engine.runtime.listing_complete).
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
        self.pods = {p.id: p for p in pods}
        self.stopped_pods = set()
        self.containers = {c.id: c for c in containers}
        self.listing_complete = True
        deferred, self._deferred = self._deferred, {}
        self._carry.update({cid: u for cid, u in deferred.items() if cid in self.containers})

    def release_deferred(self) -> list[api.ContainerUpdate]:
        """No Synchronize came: the deferred updates, to send with UpdateContainers;
        later ones of containers the view has not heard of are sent at once."""
        self._holding = False
        deferred, self._deferred = self._deferred, {}
        return list(deferred.values())

    def knows(self, container_id: str) -> bool:
        return container_id in self.containers

    def pod(self, p: api.PodSandbox) -> None:
        if p.id:
            self.pods[p.id] = p

    def pod_stopped(self, p: api.PodSandbox) -> None:
        self.pod(p)
        self.stopped_pods.add(p.id)

    def pod_removed(self, pod_id: str) -> None:
        self.pods.pop(pod_id, None)
        self.stopped_pods.discard(pod_id)
        for cid in [c.id for c in self.containers.values() if c.pod_sandbox_id == pod_id]:
            del self.containers[cid]

    def container(self, c: api.Container, state: int | None = None) -> None:
        if not c.id:
            return
        copy = api.Container()
        copy.CopyFrom(c)
        if state is not None:
            copy.state = state  # type: ignore[assignment]
        self.containers[c.id] = copy

    def container_removed(self, container_id: str) -> None:
        self.containers.pop(container_id, None)

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

    async def _update(self, request: pb.UpdateContainerResourcesRequest) -> pb.UpdateContainerResourcesResponse:
        cid = request.container_id
        update = cpuset_update(cid, request.linux)
        if cid not in self.containers:
            if self.listing_complete:
                raise rpc_error(grpc.StatusCode.NOT_FOUND, f"container {cid} is not known to the runtime")
            if self._holding:
                self._deferred[cid] = update  # the runtime may well have it: see `synchronize`
                return pb.UpdateContainerResourcesResponse()
            # No Synchronize is coming: sent alone, as the runtime may have it, never in a
            # hook's reply (one it does not have could fail the runtime's call); during a
            # hook, right after its reply, as a late decision's are (hooks.Hooks._late).
            if self._collecting is not None:
                self._after_hook[cid] = update
                return pb.UpdateContainerResourcesResponse()
            return await self._send_alone(cid, update, grpc.StatusCode.NOT_FOUND)
        if self._collecting is not None:
            self._collecting[cid] = update
            return pb.UpdateContainerResourcesResponse()
        return await self._send_alone(cid, update, grpc.StatusCode.UNKNOWN)

    async def _send_alone(self, cid: str, update: api.ContainerUpdate,
                          failed_code: grpc.StatusCode) -> pb.UpdateContainerResourcesResponse:
        if self._send is None:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "not connected to the runtime's NRI socket")
        try:
            failed = await self._send([update])
        except Exception as e:  # the ttRPC call's failure, as the engine understands one
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"UpdateContainers: {e}") from None
        if failed:
            raise rpc_error(failed_code, f"the runtime failed to update container {cid}")
        return pb.UpdateContainerResourcesResponse()

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

    # -- the engine's calls ----------------------------------------------------------------

    async def call(self, path: str, request: Message, reply_type: type[R], timeout: float | None = 10.0) -> R:
        name = path.rpartition("/")[2]
        reply: Message
        if name == "UpdateContainerResources" and isinstance(request, pb.UpdateContainerResourcesRequest):
            reply = await self._update(request)
        elif name == "Version":
            if not self.up:
                raise rpc_error(grpc.StatusCode.UNAVAILABLE, "not connected to the runtime's NRI socket")
            reply = pb.VersionResponse(version="0.1.0", runtime_name=self.runtime_name or "NRI",
                                       runtime_version=self.runtime_version, runtime_api_version="NRI")
        elif name == "ListPodSandbox":
            reply = pb.ListPodSandboxResponse(items=[self._cri_pod(p) for p in self.pods.values()])
        elif name == "PodSandboxStatus" and isinstance(request, pb.PodSandboxStatusRequest):
            reply = self._pod_status(request.pod_sandbox_id)
        elif name == "ListContainers":
            reply = pb.ListContainersResponse(containers=[cri_container(c) for c in self.containers.values()])
        elif name == "ContainerStatus" and isinstance(request, pb.ContainerStatusRequest):
            reply = self._container_status(request.container_id)
        else:
            raise rpc_error(grpc.StatusCode.UNIMPLEMENTED, f"{path} is not available under NRI")
        if isinstance(reply, reply_type):  # the engine's own message types: no copy needed
            return reply
        return reply_type.FromString(reply.SerializeToString())

    def _cri_pod(self, p: api.PodSandbox) -> pb.PodSandbox:
        state = pb.SANDBOX_NOTREADY if p.id in self.stopped_pods else pb.SANDBOX_READY
        return pb.PodSandbox(id=p.id, metadata=pb.PodSandboxMetadata(name=p.name, uid=p.uid, namespace=p.namespace),
                             state=state, labels=dict(p.labels), annotations=dict(p.annotations))

    def _pod_status(self, pod_id: str) -> pb.PodSandboxStatusResponse:
        p = self.pods.get(pod_id)
        if p is None:
            raise rpc_error(grpc.StatusCode.NOT_FOUND, f"pod {pod_id} is not known to the runtime")
        pod = self._cri_pod(p)
        status = pb.PodSandboxStatus(id=p.id, metadata=pod.metadata, state=pod.state,
                                     labels=dict(p.labels), annotations=dict(p.annotations))
        info = {"config": {"linux": {"cgroup_parent": p.linux.cgroup_parent}}}
        return pb.PodSandboxStatusResponse(status=status, info={"info": json.dumps(info)})

    def _container_status(self, container_id: str) -> pb.ContainerStatusResponse:
        c = self.containers.get(container_id)
        if c is None:
            raise rpc_error(grpc.StatusCode.NOT_FOUND, f"container {container_id} is not known to the runtime")
        cri = cri_container(c)
        r = cri_resources(c.linux.resources)
        linux: dict[str, object] = {"resources": {
            "cpu": {"shares": r.cpu_shares, "quota": r.cpu_quota, "period": r.cpu_period,
                    "cpus": r.cpuset_cpus, "mems": r.cpuset_mems},
            "memory": {"limit": r.memory_limit_in_bytes}}}
        if c.linux.cgroups_path:  # where the engine's block I/O and RDT classes go (engine/classes.py)
            linux["cgroupsPath"] = c.linux.cgroups_path
        spec = {"linux": linux}
        status = pb.ContainerStatus(id=c.id, metadata=cri.metadata, state=cri.state,
                                    labels=dict(c.labels), annotations=dict(c.annotations))
        # The pid, as containerd's verbose status has it: the reconcile reads the real cpuset
        # from the process's cgroup (engine/realcpuset.py), which the spec cannot show.
        verbose: dict[str, object] = {"runtimeSpec": spec}
        if c.pid:
            verbose["pid"] = c.pid
        return pb.ContainerStatusResponse(status=status, info={"info": json.dumps(verbose)})
