"""The relay's runtime port (relay/runtime.py) against a small CRI server: the engine's
records from CRI replies and verbose info, the v1alpha2 fallback of updates, and each
gRPC status as the port's error (the engine catches no gRPC error of a runtime call)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.runtime import ContainerDetail, ContainerInfo, NotFound, PodInfo, RuntimeFailure, Unavailable
from cri_resmgr.relay.runtime import CriRuntime
from cri_resmgr.transport.upstream import Upstream

V1 = "/runtime.v1.RuntimeService/"
V1ALPHA2 = "/runtime.v1alpha2.RuntimeService/"


class _Server(grpc.GenericRpcHandler):
    """Answers a few CRI calls; `v1_updates` False: v1's UpdateContainerResources is
    UNIMPLEMENTED (an old runtime), v1alpha2's takes it."""

    def __init__(self, v1_updates: bool):
        self.v1_updates = v1_updates
        self.updated: list[tuple[str, str, str]] = []  # (service, container, cpuset)
        self.update_code: grpc.StatusCode | None = None

    def service(self, details):
        method = details.method
        service, _, name = method.rpartition("/")
        table = {
            "ListPodSandbox": (pb.ListPodSandboxRequest, self.list_pods),
            "PodSandboxStatus": (pb.PodSandboxStatusRequest, self.pod_status),
            "ListContainers": (pb.ListContainersRequest, self.list_containers),
            "ContainerStatus": (pb.ContainerStatusRequest, self.container_status),
            "UpdateContainerResources": (pb.UpdateContainerResourcesRequest, self.update),
        }
        if service + "/" == V1 and name == "UpdateContainerResources" and not self.v1_updates:
            return None  # gRPC answers UNIMPLEMENTED
        if service + "/" not in (V1, V1ALPHA2) or name not in table:
            return None
        kind, fn = table[name]

        async def handle(req, ctx, fn=fn, service=service):
            return await fn(req, ctx, service)
        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=kind.FromString,
                                                   response_serializer=lambda m: m.SerializeToString())

    async def list_pods(self, req, ctx, service):
        return pb.ListPodSandboxResponse(items=[
            pb.PodSandbox(id="p1", metadata=pb.PodSandboxMetadata(name="web", namespace="default", uid="u1"),
                          state=pb.SANDBOX_READY, labels={"app": "web"}),
            pb.PodSandbox(id="p2", metadata=pb.PodSandboxMetadata(name="old", namespace="default", uid="u2"),
                          state=pb.SANDBOX_NOTREADY)])

    async def pod_status(self, req, ctx, service):
        if req.pod_sandbox_id != "p1":
            await ctx.abort(grpc.StatusCode.NOT_FOUND, f"pod {req.pod_sandbox_id} not found")
        info = {"info": json.dumps({"config": {"linux": {"cgroup_parent": "/kubepods/pod-u1"}}})} \
            if req.verbose else {}
        return pb.PodSandboxStatusResponse(status=pb.PodSandboxStatus(
            id="p1", metadata=pb.PodSandboxMetadata(name="web", namespace="default", uid="u1"),
            state=pb.SANDBOX_READY, annotations={"a": "1"}), info=info)

    async def list_containers(self, req, ctx, service):
        return pb.ListContainersResponse(containers=[
            pb.Container(id="c1", pod_sandbox_id="p1", metadata=pb.ContainerMetadata(name="app", attempt=2),
                         state=pb.CONTAINER_RUNNING, labels={"l": "v"}, annotations={"x": "y"}),
            pb.Container(id="c2", pod_sandbox_id="p1", metadata=pb.ContainerMetadata(name="init"),
                         state=pb.CONTAINER_EXITED),
            pb.Container(id="c3", pod_sandbox_id="p1", metadata=pb.ContainerMetadata(name="new"),
                         state=pb.CONTAINER_CREATED),
            pb.Container(id="c4", pod_sandbox_id="p1", metadata=pb.ContainerMetadata(name="odd"),
                         state=pb.CONTAINER_UNKNOWN)])

    async def container_status(self, req, ctx, service):
        if req.container_id != "c1":
            await ctx.abort(grpc.StatusCode.NOT_FOUND, "container not found")
        spec = {"linux": {"cgroupsPath": "/kubepods/pod-u1/c1",
                          "resources": {"cpu": {"cpus": "1", "shares": 1024}, "memory": {"limit": 1000}}}}
        info = {"info": json.dumps({"pid": 4321, "runtimeSpec": spec})} if req.verbose else {}
        return pb.ContainerStatusResponse(status=pb.ContainerStatus(id="c1"), info=info)

    async def update(self, req, ctx, service):
        if self.update_code is not None:
            await ctx.abort(self.update_code, "refused")
        self.updated.append((service, req.container_id, req.linux.cpuset_cpus))
        return pb.UpdateContainerResourcesResponse()


async def _serve(tmp: Path, v1_updates: bool = True) -> tuple[_Server, grpc.aio.Server, Upstream]:
    handler = _Server(v1_updates)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    sock = str(tmp / "cri.sock")
    server.add_insecure_port("unix://" + sock)
    await server.start()
    return handler, server, Upstream(sock)


def test_listings_and_details_in_the_engines_terms(tmp_path):
    async def go():
        _, server, up = await _serve(tmp_path)
        try:
            rt = CriRuntime(up)
            assert rt.listing_complete and rt.path == up.path
            pods = await rt.pods()
            assert pods == [PodInfo(id="p1", name="web", namespace="default", uid="u1", ready=True,
                                    labels={"app": "web"}),
                            PodInfo(id="p2", name="old", namespace="default", uid="u2", ready=False)]
            assert await rt.pod_info("p1") == PodInfo(id="p1", name="web", namespace="default", uid="u1",
                                                      ready=True, cgroup_parent="/kubepods/pod-u1",
                                                      annotations={"a": "1"})
            listed = await rt.containers()
            assert listed[0] == ContainerInfo(id="c1", pod_id="p1", name="app", attempt=2, state="running",
                                              annotations={"x": "y"}, labels={"l": "v"})
            assert listed[0].key == "p1:app:2"
            assert [c.state for c in listed] == ["running", "exited", "created", "unknown"]
            assert await rt.container_detail("c1") == ContainerDetail(
                resources=pb.LinuxContainerResources(cpuset_cpus="1", cpu_shares=1024, memory_limit_in_bytes=1000),
                pid=4321, cgroups_path="/kubepods/pod-u1/c1")
            with pytest.raises(NotFound, match="container not found"):
                await rt.container_detail("gone")
            with pytest.raises(NotFound):
                await rt.pod_info("gone")
        finally:
            await up.close()
            await server.stop(0)
    asyncio.run(go())


@pytest.mark.parametrize("v1_updates, service", [(True, V1), (False, V1ALPHA2)])
def test_an_update_goes_as_v1_else_as_v1alpha2(tmp_path, v1_updates, service):
    async def go():
        handler, server, up = await _serve(tmp_path, v1_updates)
        try:
            await CriRuntime(up).update("c1", pb.LinuxContainerResources(cpuset_cpus="0-1"))
            assert handler.updated == [(service.rstrip("/"), "c1", "0-1")]
        finally:
            await up.close()
            await server.stop(0)
    asyncio.run(go())


@pytest.mark.parametrize("code, kind, reason", [
    (grpc.StatusCode.NOT_FOUND, NotFound, "NOT_FOUND"),
    (grpc.StatusCode.UNAVAILABLE, Unavailable, "UNAVAILABLE"),
    (grpc.StatusCode.INVALID_ARGUMENT, RuntimeFailure, "INVALID_ARGUMENT"),
])
def test_a_failed_update_is_the_ports_error(tmp_path, code, kind, reason):
    async def go():
        handler, server, up = await _serve(tmp_path)
        handler.update_code = code
        try:
            with pytest.raises(kind) as raised:
                await CriRuntime(up).update("c1", pb.LinuxContainerResources(cpuset_cpus="0"))
            assert raised.value.reason == reason and raised.value.details == "refused"
            assert str(raised.value) == f"{reason}: refused"
        finally:
            await up.close()
            await server.stop(0)
    asyncio.run(go())


def test_no_runtime_is_unavailable_not_a_grpc_error(tmp_path):
    async def go():
        up = Upstream(str(tmp_path / "nothing.sock"))
        try:
            with pytest.raises(Unavailable):
                await CriRuntime(up).version(timeout=5)
            with pytest.raises(Unavailable):
                await CriRuntime(up).containers(timeout=5)
        finally:
            await up.close()
    asyncio.run(go())
