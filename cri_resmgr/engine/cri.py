"""The relay's CRI adapter: the engine's core (`engine/core.py`) as an interception table.

Each interceptor decodes kubelet's request into the engine's forms (a pod record, a
container spec, an id), calls the core, writes its decision into the request it
forwards to the runtime (the policy's cpuset), and returns the runtime's reply. The
core's refusals become the call's gRPC status. The simulator drives the same table
with recorded calls (`simulate/engine.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine import classify, exits, messages
from cri_resmgr.engine.cache import PodRecord
from cri_resmgr.engine.core import EXITS, ContainerSpec, Core, PolicyFailed, ResizeRefused, write_cpuset
from cri_resmgr.policy.api import Resources
from cri_resmgr.transport.contract import (
    UNCHANGED,
    DumpSink,
    InterceptError,
    InterceptionTable,
    Interceptor,
    Keep,
    ReplyObserver,
    Request,
    StreamObserver,
    Transport,
)

M = TypeVar("M", bound=Message)


def interceptors(core: Core | None) -> InterceptionTable:
    """The calls the core takes (`Core.events`), each as an interceptor; none for None."""
    if core is None:
        return {}
    events = core.events
    table: dict[str, Interceptor | ReplyObserver | StreamObserver] = {
        name: make(core) for name, make in _ADAPTERS.items() if name in events}
    if EXITS in events:
        # ListContainers, StreamContainers, ContainerStatus
        table.update(exits.interceptors(core.on_exit, core.holding))
    return table


class TransportFeed:
    """The relay's transport as the engine's `controller.Feed`: the core it is handed
    becomes the transport's interception table."""

    def __init__(self, transport: Transport):
        self._transport = transport

    def reconfigure(self, *, engine: Core | None | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None:
        if engine is UNCHANGED:
            self._transport.reconfigure(dumper=dumper)
        else:
            self._transport.reconfigure(interceptors=interceptors(engine), dumper=dumper)


def pod_record(pod_id: str, config: pb.PodSandboxConfig) -> PodRecord:
    """A pod as a RunPodSandbox's (or a CreateContainer's) sandbox config describes it."""
    return PodRecord(id=pod_id, name=config.metadata.name, namespace=config.metadata.namespace,
                     uid=config.metadata.uid, cgroup_parent=config.linux.cgroup_parent,
                     annotations=dict(config.annotations), labels=dict(config.labels))


def container_spec(m: pb.CreateContainerRequest) -> ContainerSpec:
    cfg = m.config
    return ContainerSpec(pod=pod_record(m.pod_sandbox_id, m.sandbox_config), name=cfg.metadata.name,
                         attempt=cfg.metadata.attempt, resources=cfg.linux.resources,
                         annotations=cfg.annotations, labels=cfg.labels,
                         pod_resources=classify.pod_level(m.sandbox_config.linux))


def _refused(e: PolicyFailed | ResizeRefused) -> InterceptError:
    code = grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(e, ResizeRefused) else grpc.StatusCode.INTERNAL
    return InterceptError(code, e.message)


# -- pods ----------------------------------------------------------------------------------

def _run_pod(core: Core) -> Interceptor:
    async def run_pod(req: Request) -> pb.RunPodSandboxResponse:
        m = messages.request(req, pb.RunPodSandboxRequest)
        reply = await messages.forward(req, m, pb.RunPodSandboxResponse)
        await core.pod_started(pod_record(reply.pod_sandbox_id, m.config))
        return reply
    return run_pod


def _stop_pod(core: Core) -> Interceptor:
    async def stop_pod(req: Request) -> pb.StopPodSandboxResponse:
        m = messages.request(req, pb.StopPodSandboxRequest)
        reply = await messages.forward(req, m, pb.StopPodSandboxResponse)
        await core.pod_stopped(m.pod_sandbox_id)
        return reply
    return stop_pod


def _remove_pod(core: Core) -> Interceptor:
    async def remove_pod(req: Request) -> pb.RemovePodSandboxResponse:
        m = messages.request(req, pb.RemovePodSandboxRequest)
        reply = await messages.forward(req, m, pb.RemovePodSandboxResponse)
        await core.pod_removed(m.pod_sandbox_id)
        return reply
    return remove_pod


def _resize_pod(core: Core) -> Interceptor:
    """kubelet's UpdatePodSandboxResources (1.33+; 1.36 waits for it and fails the pod's
    resize on any error but UNIMPLEMENTED): the core decides, then the call goes on. A
    runtime without the call (containerd 1.6, 1.7) answers UNIMPLEMENTED, which kubelet
    takes as done: it goes on to update the pod's cgroup and its containers, so the
    decision stands (the core is told the runtime's step went through) and kubelet gets
    the runtime's UNIMPLEMENTED unchanged."""
    async def resize_pod(req: Request) -> pb.UpdatePodSandboxResourcesResponse:
        m = messages.request(req, pb.UpdatePodSandboxResourcesRequest)
        replies: list[pb.UpdatePodSandboxResourcesResponse] = []
        unimplemented: list[grpc.aio.AioRpcError] = []

        async def send() -> None:
            try:
                replies.append(await messages.forward(req, m, pb.UpdatePodSandboxResourcesResponse))
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                unimplemented.append(e)

        r = m.resources
        resources = classify.pod_requirements(r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes) \
            if m.HasField("resources") else None
        try:
            await core.pod_resized(m.pod_sandbox_id, resources, send)
        except (PolicyFailed, ResizeRefused) as e:
            raise _refused(e) from None
        if unimplemented:
            raise unimplemented[0]
        return replies[-1]
    return resize_pod


# -- containers ------------------------------------------------------------------------------

def _create(core: Core) -> Interceptor:
    async def create(req: Request) -> pb.CreateContainerResponse:
        m = messages.request(req, pb.CreateContainerRequest)
        replies: list[pb.CreateContainerResponse] = []

        async def created(placed: Resources | None) -> str:
            if placed is not None:
                write_cpuset(m.config.linux.resources, placed)
            replies.append(await messages.forward(req, m, pb.CreateContainerResponse))
            return replies[-1].container_id

        try:
            await core.create(container_spec(m), created)
        except PolicyFailed as e:
            raise _refused(e) from None
        return replies[-1]
    return create


def _start(core: Core) -> Interceptor:
    async def start(req: Request) -> pb.StartContainerResponse:
        m = messages.request(req, pb.StartContainerRequest)
        replies: list[pb.StartContainerResponse] = []

        async def started() -> None:
            replies.append(await messages.forward(req, m, pb.StartContainerResponse))

        await core.start(m.container_id, started)
        return replies[-1]
    return start


def _stop(core: Core) -> Interceptor:
    async def stop(req: Request) -> pb.StopContainerResponse:
        m = messages.request(req, pb.StopContainerRequest)
        return await _forward_then(req, m.container_id, pb.StopContainerResponse, core.stopped, core)
    return stop


def _remove(core: Core) -> Interceptor:
    async def remove(req: Request) -> pb.RemoveContainerResponse:
        m = messages.request(req, pb.RemoveContainerRequest)
        return await _forward_then(req, m.container_id, pb.RemoveContainerResponse, core.removed, core)
    return remove


async def _forward_then(req: Request, container_id: str, kind: type[M],
                        done: Callable[[str], Awaitable[None]], core: Core) -> M:
    """Tells the core once the runtime has stopped or removed the container; a
    container the runtime no longer knows is removed either way."""
    try:
        reply = await messages.forward(req, req.message, kind)
    except grpc.aio.AioRpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            await core.removed(container_id)
        raise
    await done(container_id)
    return reply


def _update(core: Core) -> Interceptor:
    async def update(req: Request) -> pb.UpdateContainerResourcesResponse:
        m = messages.request(req, pb.UpdateContainerResourcesRequest)
        replies: list[pb.UpdateContainerResourcesResponse] = []

        async def send(keep: Resources | None) -> None:
            if keep is not None:
                write_cpuset(m.linux, keep)
            replies.append(await messages.forward(req, m, pb.UpdateContainerResourcesResponse))

        try:
            await core.update(m.container_id, m.linux if m.HasField("linux") else None, send)
        except (PolicyFailed, ResizeRefused) as e:
            raise _refused(e) from None
        return replies[-1]
    return update


_ADAPTERS: dict[str, Callable[[Core], Interceptor]] = {
    "RunPodSandbox": _run_pod,
    "StopPodSandbox": _stop_pod,
    "RemovePodSandbox": _remove_pod,
    "UpdatePodSandboxResources": _resize_pod,
    "CreateContainer": _create,
    "StartContainer": _start,
    "StopContainer": _stop,
    "RemoveContainer": _remove,
    "UpdateContainerResources": _update,
}
