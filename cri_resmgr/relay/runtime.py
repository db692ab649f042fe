"""The relay's runtime port: the engine's runtime calls as CRI on the relay's own channel.

The engine asks in its own terms (`engine.runtime.RuntimePort`); this adapter makes the
CRI calls (runtime.v1; an UpdateContainerResources the runtime does not implement there
goes again as v1alpha2, which is wire-identical), reads the runtime's verbose info JSON
(`verbose.py`) into the port's records, and turns a call's gRPC status into the port's
errors (NOT_FOUND: `NotFound`; UNAVAILABLE: `Unavailable`; any other: `RuntimeFailure`
named by its status).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

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
from cri_resmgr.relay import verbose
from cri_resmgr.transport.upstream import Upstream

R = TypeVar("R", bound=Message)

V1 = "/runtime.v1.RuntimeService/"
V1ALPHA2 = "/runtime.v1alpha2.RuntimeService/"

_STATES: dict[int, ContainerPhase] = {
    pb.CONTAINER_CREATED: "created",
    pb.CONTAINER_RUNNING: "running",
    pb.CONTAINER_EXITED: "exited",
}


def failure(e: grpc.aio.AioRpcError) -> RuntimeFailure:
    """A failed call's status as the port's error."""
    code, details = e.code(), e.details() or ""
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(details)
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(details)
    return RuntimeFailure(details, code.name)


async def _answer(call: Awaitable[R]) -> R:
    try:
        return await call
    except grpc.aio.AioRpcError as e:
        raise failure(e) from None


def container_info(c: pb.Container) -> ContainerInfo:
    return ContainerInfo(id=c.id, pod_id=c.pod_sandbox_id, name=c.metadata.name, attempt=c.metadata.attempt,
                         state=_STATES.get(c.state, "unknown"), annotations=dict(c.annotations),
                         labels=dict(c.labels))


class CriRuntime:
    """The runtime behind `upstream`, as the engine's `RuntimePort`."""

    listing_complete = True  # a CRI listing names everything the runtime runs

    def __init__(self, upstream: Upstream):
        self._up = upstream

    @property
    def path(self) -> str:
        return self._up.path

    async def version(self, timeout: float = DEFAULT_TIMEOUT) -> RuntimeVersion:
        v = await _answer(self._up.version(timeout))  # v1, else v1alpha2
        return RuntimeVersion(name=v.runtime_name, version=v.runtime_version, api_version=v.runtime_api_version)

    async def pods(self, timeout: float = DEFAULT_TIMEOUT) -> list[PodInfo]:
        listed = await _answer(self._up.call(V1 + "ListPodSandbox", pb.ListPodSandboxRequest(),
                                             pb.ListPodSandboxResponse, timeout))
        return [PodInfo(id=p.id, name=p.metadata.name, namespace=p.metadata.namespace, uid=p.metadata.uid,
                        ready=p.state == pb.SANDBOX_READY, annotations=dict(p.annotations), labels=dict(p.labels))
                for p in listed.items]

    async def pod_info(self, pod_id: str, timeout: float = DEFAULT_TIMEOUT) -> PodInfo:
        status = await _answer(self._up.call(V1 + "PodSandboxStatus",
                                             pb.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=True),
                                             pb.PodSandboxStatusResponse, timeout))
        s = status.status
        return PodInfo(id=pod_id, name=s.metadata.name, namespace=s.metadata.namespace, uid=s.metadata.uid,
                       ready=s.state == pb.SANDBOX_READY, cgroup_parent=verbose.cgroup_parent(status.info),
                       annotations=dict(s.annotations), labels=dict(s.labels))

    async def containers(self, timeout: float = DEFAULT_TIMEOUT) -> list[ContainerInfo]:
        listed = await _answer(self._up.call(V1 + "ListContainers", pb.ListContainersRequest(),
                                             pb.ListContainersResponse, timeout))
        return [container_info(c) for c in listed.containers]

    async def container_detail(self, container_id: str, timeout: float = DEFAULT_TIMEOUT) -> ContainerDetail:
        status = await _answer(self._up.call(V1 + "ContainerStatus",
                                             pb.ContainerStatusRequest(container_id=container_id, verbose=True),
                                             pb.ContainerStatusResponse, timeout))
        info = status.info
        return ContainerDetail(resources=verbose.resources(info), pid=verbose.pid(info),
                               cgroups_path=verbose.cgroups_path(info))

    async def update(self, container_id: str, resources: pb.LinuxContainerResources,
                     timeout: float = DEFAULT_TIMEOUT) -> None:
        request = pb.UpdateContainerResourcesRequest(container_id=container_id, linux=resources)
        reply = pb.UpdateContainerResourcesResponse
        try:
            await self._up.call(V1 + "UpdateContainerResources", request, reply, timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise failure(e) from None
            await _answer(self._up.call(V1ALPHA2 + "UpdateContainerResources", request, reply, timeout))
