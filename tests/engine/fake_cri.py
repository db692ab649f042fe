"""A stateful in-process CRI runtime double for policy-engine tests at scale.

The real containerd on these 2-CPU machines cannot show a 256-CPU topology, nor
a CreateContainer that is slow or fails on demand; this double can. It keeps
pods and containers and records the cpuset each container was last given.
"""

from __future__ import annotations

import asyncio
import itertools

import grpc

from cri_resmgr._proto import runtime_v1_pb2 as pb

V1 = "/runtime.v1.RuntimeService/"


class FakeCRI:
    def __init__(self, socket_path: str, create_delay: float = 0.0):
        self.socket_path = socket_path
        self.create_delay = create_delay
        self.fail_names: dict[str, grpc.StatusCode] = {}
        self.pods: dict[str, pb.PodSandboxConfig] = {}
        self.containers: dict[str, dict] = {}  # id -> {pod, name, state, resources}
        self.updates = 0
        self.fail_updates = 0  # fail this many UpdateContainerResources with UNAVAILABLE
        # Awaited by each UpdateContainerResources before it answers (a test does something
        # meanwhile); a true result refuses the update with UNAVAILABLE.
        self.update_gate = None
        self.pids: dict[str, int] = {}  # id -> the "pid" a verbose ContainerStatus gives
        # StreamContainers and StreamPodSandboxes (KEP-5825): this many items a message, as
        # containerd's 5000; `stream_fails`: after that many messages StreamContainers is
        # aborted with UNAVAILABLE.
        self.stream_batch = 5000
        self.stream_fails: int | None = None
        # UpdatePodSandboxResources: None answers it (containerd 2.x); a code refuses it with that
        # status (UNIMPLEMENTED: containerd 1.6, 1.7). Each request is kept, in order.
        self.pod_resize_code: grpc.StatusCode | None = None
        self.pod_resizes: list[pb.UpdatePodSandboxResourcesRequest] = []
        self._ids = itertools.count(1)
        # Called with (container id, pid, cgroups path) as a container starts: tests build its cgroup there.
        self.on_start = None
        self.server: grpc.aio.Server | None = None

    def cpuset(self, cid: str) -> str:
        return self.containers[cid]["resources"].cpuset_cpus

    def live(self) -> dict[str, dict]:
        return {k: v for k, v in self.containers.items() if v["state"] != pb.ContainerState.CONTAINER_EXITED}

    async def start(self) -> None:
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((_Handlers(self),))
        self.server.add_insecure_port("unix://" + self.socket_path)
        await self.server.start()

    async def stop(self) -> None:
        if self.server:
            await self.server.stop(0)


class _Handlers(grpc.GenericRpcHandler):
    def __init__(self, fake: FakeCRI):
        self.f = fake
        self.table = {
            "Version": (pb.VersionRequest, self.version),
            "RunPodSandbox": (pb.RunPodSandboxRequest, self.run_pod),
            "StopPodSandbox": (pb.StopPodSandboxRequest, self.stop_pod),
            "RemovePodSandbox": (pb.RemovePodSandboxRequest, self.remove_pod),
            "ListPodSandbox": (pb.ListPodSandboxRequest, self.list_pods),
            "PodSandboxStatus": (pb.PodSandboxStatusRequest, self.pod_status),
            "CreateContainer": (pb.CreateContainerRequest, self.create),
            "StartContainer": (pb.StartContainerRequest, self.start),
            "StopContainer": (pb.StopContainerRequest, self.stop),
            "RemoveContainer": (pb.RemoveContainerRequest, self.remove),
            "ListContainers": (pb.ListContainersRequest, self.list),
            "ContainerStatus": (pb.ContainerStatusRequest, self.status),
            "UpdateContainerResources": (pb.UpdateContainerResourcesRequest, self.update),
            "UpdatePodSandboxResources": (pb.UpdatePodSandboxResourcesRequest, self.update_pod),
            "RuntimeConfig": (pb.RuntimeConfigRequest, self.runtime_config),
        }
        self.streams = {
            "StreamContainers": (pb.StreamContainersRequest, self.stream_containers),
            "StreamPodSandboxes": (pb.StreamPodSandboxesRequest, self.stream_pods),
        }

    def service(self, details):
        if not details.method.startswith(V1):
            return None
        name = details.method[len(V1):]
        if name in self.streams:
            req_type, stream = self.streams[name]
            return grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=req_type.FromString, response_serializer=lambda m: m.SerializeToString())
        entry = self.table.get(name)
        if entry is None:
            return None
        req_type, fn = entry
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req_type.FromString, response_serializer=lambda m: m.SerializeToString())

    async def version(self, req, ctx):
        return pb.VersionResponse(version="0.1.0", runtime_name="fake-cri", runtime_version="1",
                                  runtime_api_version="v1")

    async def run_pod(self, req, ctx):
        pid = f"pod{next(self.f._ids):04d}"
        self.f.pods[pid] = req.config
        return pb.RunPodSandboxResponse(pod_sandbox_id=pid)

    async def stop_pod(self, req, ctx):
        for c in self.f.containers.values():
            if c["pod"] == req.pod_sandbox_id:
                c["state"] = pb.ContainerState.CONTAINER_EXITED
        return pb.StopPodSandboxResponse()

    async def remove_pod(self, req, ctx):
        self.f.pods.pop(req.pod_sandbox_id, None)
        for cid in [k for k, c in self.f.containers.items() if c["pod"] == req.pod_sandbox_id]:
            del self.f.containers[cid]
        return pb.RemovePodSandboxResponse()

    async def list_pods(self, req, ctx):
        return pb.ListPodSandboxResponse(items=[
            pb.PodSandbox(id=k, metadata=v.metadata, state=pb.PodSandboxState.SANDBOX_READY)
            for k, v in self.f.pods.items()])

    async def pod_status(self, req, ctx):
        import json
        cfg = self.f.pods[req.pod_sandbox_id]
        info = {"info": json.dumps({"config": {"linux": {"cgroup_parent": cfg.linux.cgroup_parent}}})}
        return pb.PodSandboxStatusResponse(status=pb.PodSandboxStatus(
            id=req.pod_sandbox_id, metadata=cfg.metadata, annotations=cfg.annotations), info=info)

    async def create(self, req, ctx):
        if self.f.create_delay:
            await asyncio.sleep(self.f.create_delay)
        code = self.f.fail_names.get(req.config.metadata.name)
        if code is not None:
            await ctx.abort(code, f"fake: refusing to create {req.config.metadata.name}")
        if req.pod_sandbox_id not in self.f.pods:
            await ctx.abort(grpc.StatusCode.NOT_FOUND, f"pod {req.pod_sandbox_id} not found")
        cid = f"ctr{next(self.f._ids):060d}"
        res = pb.LinuxContainerResources()
        res.CopyFrom(req.config.linux.resources)
        self.f.containers[cid] = {"pod": req.pod_sandbox_id, "name": req.config.metadata.name,
                                  "metadata": req.config.metadata,
                                  "state": pb.ContainerState.CONTAINER_CREATED, "resources": res}
        return pb.CreateContainerResponse(container_id=cid)

    async def start(self, req, ctx):
        c = self.f.containers[req.container_id]
        c["state"] = pb.ContainerState.CONTAINER_RUNNING
        if self.f.on_start is not None:
            # Where a runtime would have put it: a PID and a cgroupfs path, as containerd's info tells them.
            c["pid"] = 100000 + int(req.container_id[3:])
            c["cgroups_path"] = f"/crirm-fake/{c['pod']}/{req.container_id}"
            self.f.on_start(req.container_id, c["pid"], c["cgroups_path"])
        return pb.StartContainerResponse()

    async def stop(self, req, ctx):
        c = self.f.containers.get(req.container_id)
        if c is None:
            await ctx.abort(grpc.StatusCode.NOT_FOUND, "container not found")
        c["state"] = pb.ContainerState.CONTAINER_EXITED
        return pb.StopContainerResponse()

    async def remove(self, req, ctx):
        self.f.containers.pop(req.container_id, None)
        return pb.RemoveContainerResponse()

    async def list(self, req, ctx):
        f = req.filter
        return pb.ListContainersResponse(containers=[
            pb.Container(id=k, pod_sandbox_id=c["pod"], metadata=c["metadata"], state=c["state"])
            for k, c in self.f.containers.items()
            if (not f.id or f.id == k) and (not f.pod_sandbox_id or f.pod_sandbox_id == c["pod"])
            and (not f.HasField("state") or f.state.state == c["state"])])

    async def stream_containers(self, req, ctx):
        listed = list((await self.list(req, ctx)).containers)
        batch = self.f.stream_batch
        for i, start in enumerate(range(0, len(listed), batch)):
            if i == self.f.stream_fails:
                await ctx.abort(grpc.StatusCode.UNAVAILABLE, "fake: the runtime lost its listing")
            yield pb.StreamContainersResponse(containers=listed[start:start + batch])

    async def stream_pods(self, req, ctx):
        listed = list((await self.list_pods(req, ctx)).items)
        for start in range(0, len(listed), self.f.stream_batch):
            yield pb.StreamPodSandboxesResponse(pod_sandboxes=listed[start:start + self.f.stream_batch])

    async def runtime_config(self, req, ctx):
        return pb.RuntimeConfigResponse(linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CgroupDriver.CGROUPFS))

    async def status(self, req, ctx):
        c = self.f.containers.get(req.container_id)
        if c is None:
            await ctx.abort(grpc.StatusCode.NOT_FOUND, "container not found")
        import json
        pid = self.f.pids.get(req.container_id) or c.get("pid")
        verbose: dict = {"pid": pid} if pid else {}
        if c.get("cgroups_path"):
            verbose["runtimeSpec"] = {"linux": {"cgroupsPath": c["cgroups_path"]}}
        info = {"info": json.dumps(verbose)} if req.verbose and verbose else {}
        return pb.ContainerStatusResponse(status=pb.ContainerStatus(id=req.container_id, state=c["state"],
                                                                    metadata=c["metadata"]), info=info)

    async def update(self, req, ctx):
        if self.f.update_gate is not None and await self.f.update_gate(req):
            await ctx.abort(grpc.StatusCode.UNAVAILABLE, "fake: update refused")
        if self.f.fail_updates > 0:
            self.f.fail_updates -= 1
            await ctx.abort(grpc.StatusCode.UNAVAILABLE, "fake: runtime busy")
        c = self.f.containers.get(req.container_id)
        if c is None:
            await ctx.abort(grpc.StatusCode.NOT_FOUND, "container not found")
        # Like containerd: zero/empty fields leave the current value alone.
        for field, value in req.linux.ListFields():
            setattr(c["resources"], field.name, value)
        self.f.updates += 1
        return pb.UpdateContainerResourcesResponse()

    async def update_pod(self, req, ctx):
        self.f.pod_resizes.append(req)
        if self.f.pod_resize_code is not None:
            await ctx.abort(self.f.pod_resize_code, f"fake: UpdatePodSandboxResources {self.f.pod_resize_code.name}")
        if req.pod_sandbox_id not in self.f.pods:
            await ctx.abort(grpc.StatusCode.NOT_FOUND, f"pod {req.pod_sandbox_id} not found")
        return pb.UpdatePodSandboxResourcesResponse()
