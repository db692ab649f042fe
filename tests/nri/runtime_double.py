"""An in-process NRI runtime double: the runtime's side of the multiplexer and
ttRPC, as containerd's NRI adaptation behaves towards a plugin.

It listens on a unix socket; a plugin that connects must RegisterPlugin on
connection 2; the double then calls Configure and Synchronize on connection 1
with the pods and containers it holds, and applies the updates the plugin
answers with, as a runtime would (a ContainerAdjustment's cpuset to the new
container, ContainerUpdates to the others, unsolicited UpdateContainers too).

As containerd does, an update reaches a container's spec (`cpus`) once the container
exists, and its cgroup (`real_cpus`) only once its task has started: a container's
task takes the spec's cpuset when it is made, before the StartContainer hook, and runs
once that hook has answered (`create`'s `hold` keeps it between the two, as the
session containerd's gated runtime does). An UpdateContainers that arrives while a call
of the double's to the plugin is in flight is recorded in `overlaps`: containerd before
NRI v0.12.1 can deadlock on it. A call on its way while the plugin sends an update of
its own counts too (neither side can tell it from one the plugin had), so `overlaps`
means something where a scenario makes no call while the plugin may send on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import Message

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
from cri_resmgr.nri.plugin import PLUGIN_SERVICE, RUNTIME_SERVICE

REQUEST_TIMEOUT_MS = 10_000

# What the double says it is in Configure, and which events it knows, by `mode`:
# "0.10": NRI v0.10 (this double's default); "0.12": containerd 2.3 (NRI v0.12: the NRI
# versions exchanged, every event its own RPC, UpdatePodSandbox); "2.1.9": containerd 2.1.9,
# which knows the events up to RemoveContainer and refuses a plugin whose mask has more
# ("invalid plugin events: 0x1800" for UpdatePodSandbox and PostUpdatePodSandbox).
MODES: dict[str, tuple[str, str, str, int]] = {  # mode: runtime name, version, NRI version, events known
    "0.10": ("double", "1.0", "v0.10.0", (1 << api.LAST - 1) - 1),
    "0.12": ("containerd", "2.3.0", "v0.12.0", (1 << api.LAST - 1) - 1),
    "2.1.9": ("containerd", "2.1.9", "", (1 << api.REMOVE_CONTAINER) - 1),
}


@dataclass
class Session:
    mux: Mux
    plugin: ttrpc.Client
    tasks: list[asyncio.Task[None]]
    registered: api.RegisterPluginRequest | None = None
    configured: api.ConfigureResponse | None = None
    refused: str | None = None  # why the runtime closed the plugin after Configure (an unknown event)
    synchronized: api.SynchronizeResponse | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # time.perf_counter() at: "registered" (RegisterPlugin received), "configured" (Configure's
    # reply decoded), "sync_start" (first part sent), "synchronized" (last reply decoded).
    times: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # the same moments on the double's `clock`


class RuntimeDouble:
    def __init__(self, socket_path: str, sync_parts: int = 1, mode: str = "0.10"):
        self.socket_path = socket_path
        self.mode = mode  # see MODES
        self.pods: dict[str, api.PodSandbox] = {}
        self.containers: dict[str, api.Container] = {}
        self.unsolicited: list[api.ContainerUpdate] = []
        # UpdateContainers that came while a call to the plugin was in flight: (its updates' ids, the calls)
        self.overlaps: list[tuple[list[str], int]] = []
        self.real: dict[str, str] = {}  # a started task's cgroup cpuset, by container id
        self.running: set[str] = set()  # containers whose task has started
        # Containers kubelet is removing or stopping whose NRI event has not come yet:
        # containerd refuses their updates ("container ... is in removing state").
        self.removing: set[str] = set()
        self.sessions: list[Session] = []
        self.sync_parts = sync_parts  # >1: Synchronize in parts with `more`, as newer runtimes do
        self.plugin_config = ""  # ConfigureRequest.config: a launched plugin's configuration file
        # False: no Synchronize after Configure, as containerd before 1.7.26 (NRI before
        # v0.7) does to the plugins it launched; the NRI version it reports then is empty.
        self.send_synchronize = True
        # Created while the plugin synchronizes (containerd#13698): in no Synchronize part
        # and without a CreateContainer event; see `created_during_sync`.
        self.hidden: list[api.Container] = []
        # Read at each moment a session's `times` records (bench: the plugin's CPU seconds).
        self.clock: Callable[[], float] | None = None
        self._server: asyncio.Server | None = None
        self._new_session = asyncio.Condition()

    # -- listening ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, self.socket_path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for s in self.sessions:
            s.mux.close()
        for s in self.sessions:
            for t in s.tasks:
                t.cancel()
            await asyncio.gather(*s.tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mux = Mux(reader, writer)
        client = ttrpc.Client(mux.open(PLUGIN_SERVICE_CONN), name="double->plugin")
        session = Session(mux, client, [])
        server = ttrpc.Server(mux.open(RUNTIME_SERVICE_CONN), {
            (RUNTIME_SERVICE, "RegisterPlugin"): lambda data: self._register(session, data),
            (RUNTIME_SERVICE, "UpdateContainers"): lambda data: self._update_containers(session, data),
        }, name="double runtime service")
        session.tasks = [asyncio.create_task(mux.run()), asyncio.create_task(server.serve()),
                         asyncio.create_task(client.receive())]
        self.sessions.append(session)
        async with self._new_session:
            self._new_session.notify_all()

    async def _register(self, session: Session, data: bytes) -> bytes:
        self._mark(session, "registered")
        session.registered = api.RegisterPluginRequest.FromString(data)
        asyncio.get_running_loop().create_task(self._set_up(session))
        return api.Empty().SerializeToString()

    async def _set_up(self, session: Session) -> None:
        """What the runtime does once a plugin registered: Configure, then Synchronize."""
        # A generous request timeout (runtimes let it be configured): on this loaded shared
        # machine the tests must not depend on the plugin answering within NRI's 2 s default.
        name, version, nri, known = MODES[self.mode]
        cfg = api.ConfigureRequest(runtime_name=name, runtime_version=version, registration_timeout=5000,
                                   request_timeout=REQUEST_TIMEOUT_MS,
                                   NRI_version=nri if self.send_synchronize else "",
                                   config=self.plugin_config)
        session.configured = await self._call(session, "Configure", cfg, api.ConfigureResponse)
        self._mark(session, "configured")
        unknown = session.configured.events & ~known
        if unknown:  # as containerd 2.1.9 does: the plugin is closed, never synchronized
            session.refused = f"invalid plugin events: 0x{unknown:x}"
            session.mux.close()
            session.ready.set()
            return
        if not self.send_synchronize:
            session.ready.set()
            return
        pods, containers = list(self.pods.values()), list(self.containers.values())
        parts = max(self.sync_parts, 1)
        reply = api.SynchronizeResponse()
        self._mark(session, "sync_start")
        for i in range(parts):
            req = api.SynchronizeRequest(pods=pods[i::parts], containers=containers[i::parts], more=i < parts - 1)
            if i == 0:
                for c in self.hidden:  # created between the snapshot and the end of Synchronize
                    self.containers[c.id] = c
                self.hidden = []
            reply = await self._call(session, "Synchronize", req, api.SynchronizeResponse)
        self._mark(session, "synchronized")
        try:
            self._apply_updates(reply.update, "Synchronize")
        except RuntimeError as e:  # containerd fails the plugin's registration
            session.refused = str(e)
            session.mux.close()
            session.ready.set()
            return
        session.synchronized = reply
        session.ready.set()

    def _mark(self, session: Session, moment: str) -> None:
        session.times[moment] = time.perf_counter()
        if self.clock is not None:
            session.cpu[moment] = self.clock()

    async def _update_containers(self, session: Session, data: bytes) -> bytes:
        req = api.UpdateContainersRequest.FromString(data)
        if session.plugin.in_flight:
            self.overlaps.append(([u.container_id for u in req.update], session.plugin.in_flight))
        self.unsolicited.extend(req.update)
        failed = self._apply_updates(req.update)
        return api.UpdateContainersResponse(failed=failed).SerializeToString()

    # -- the plugin's session ------------------------------------------------------------------

    @property
    def session(self) -> Session:
        return self.sessions[-1]

    async def wait_ready(self, count: int = 1, timeout: float = 60.0) -> Session:
        """The `count`th session, once its plugin registered, was configured and synchronized."""
        async def wait() -> Session:
            async with self._new_session:
                await self._new_session.wait_for(lambda: len(self.sessions) >= count)
            s = self.sessions[count - 1]
            await s.ready.wait()
            return s
        return await asyncio.wait_for(wait(), timeout)

    async def drop(self) -> None:
        """The runtime goes away (restart): the connection closes under the plugin."""
        s = self.session
        s.mux.close()
        for t in s.tasks:
            t.cancel()
        await asyncio.gather(*s.tasks, return_exceptions=True)

    async def _call(self, session: Session, method: str, req: Message, kind: type[Message],
                    timeout: float = REQUEST_TIMEOUT_MS / 1000) -> Message:
        data = await session.plugin.call(PLUGIN_SERVICE, method, req.SerializeToString(), timeout)
        return kind.FromString(data)

    async def call(self, method: str, req: Message, kind: type[Message],
                   timeout: float = REQUEST_TIMEOUT_MS / 1000) -> Message:
        return await self._call(self.session, method, req, kind, timeout)

    # -- what kubelet would make the runtime do ------------------------------------------------------

    async def run_pod(self, pod: api.PodSandbox) -> None:
        self.pods[pod.id] = pod
        await self.call("RunPodSandbox", api.RunPodSandboxRequest(pod=pod), api.RunPodSandboxResponse)

    async def stop_pod(self, pod_id: str) -> None:
        for c in self.containers.values():
            if c.pod_sandbox_id == pod_id:
                c.state = api.CONTAINER_STOPPED
        await self.call("StopPodSandbox", api.StopPodSandboxRequest(pod=self.pods[pod_id]), api.StopPodSandboxResponse)

    async def create(self, container: api.Container, hold: asyncio.Event | None = None,
                     held: asyncio.Event | None = None) -> api.CreateContainerResponse:
        """CreateContainer, StartContainer, PostStartContainer, as containerd's CRI
        CreateContainer and StartContainer make them; `hold`: the task is made but not
        started until it is set (`held` is set then)."""
        container.state = api.CONTAINER_CREATED
        pod = self.pods[container.pod_sandbox_id]
        reply = await self.call("CreateContainer", api.CreateContainerRequest(pod=pod, container=container),
                                api.CreateContainerResponse)
        assert isinstance(reply, api.CreateContainerResponse)
        cpu = reply.adjust.linux.resources.cpu
        if cpu.cpus:
            container.linux.resources.cpu.cpus = cpu.cpus
        if cpu.mems:
            container.linux.resources.cpu.mems = cpu.mems
        self.containers[container.id] = container
        self._apply_updates(reply.update, "CreateContainer")
        self.real[container.id] = container.linux.resources.cpu.cpus  # the task, made from the spec
        container.state = api.CONTAINER_RUNNING
        await self.call("StartContainer", api.StartContainerRequest(pod=pod, container=container),
                        api.StartContainerResponse)
        if hold is not None:
            if held is not None:
                held.set()
            await hold.wait()
        self.running.add(container.id)
        await self.call("PostStartContainer", api.PostStartContainerRequest(pod=pod, container=container),
                        api.PostStartContainerResponse)
        return reply

    async def start_event(self, cid: str) -> api.StartContainerResponse:
        """StartContainer for a container the plugin may never have been told of."""
        c = self.containers[cid]
        c.state = api.CONTAINER_RUNNING
        reply = await self.call("StartContainer", api.StartContainerRequest(pod=self.pods[c.pod_sandbox_id],
                                                                           container=c), api.StartContainerResponse)
        assert isinstance(reply, api.StartContainerResponse)
        return reply

    async def stop(self, cid: str) -> api.StopContainerResponse:
        c = self.containers[cid]
        c.state = api.CONTAINER_STOPPED
        self.running.discard(cid)
        reply = await self.call("StopContainer",
                                api.StopContainerRequest(pod=self.pods[c.pod_sandbox_id], container=c),
                                api.StopContainerResponse)
        assert isinstance(reply, api.StopContainerResponse)
        self._apply_updates(reply.update, "StopContainer")
        return reply

    async def remove(self, cid: str) -> None:
        c = self.containers.pop(cid)
        self.running.discard(cid)
        self.real.pop(cid, None)
        await self.call("RemoveContainer", api.RemoveContainerRequest(pod=self.pods[c.pod_sandbox_id], container=c),
                        api.RemoveContainerResponse)

    async def update(self, cid: str, resources: api.LinuxResources) -> api.UpdateContainerResponse:
        c = self.containers[cid]
        reply = await self.call("UpdateContainer", api.UpdateContainerRequest(
            pod=self.pods[c.pod_sandbox_id], container=c, linux_resources=resources), api.UpdateContainerResponse)
        assert isinstance(reply, api.UpdateContainerResponse)
        # As NRI does: the plugin's update of the container itself goes over kubelet's request.
        c.linux.resources.CopyFrom(resources)
        for u in reply.update:
            if u.container_id == cid:
                c.linux.resources.MergeFrom(u.linux.resources)
        self._apply_updates([u for u in reply.update if u.container_id != cid], "UpdateContainer")
        return reply

    async def resize_pod(self, pod_id: str, resources: api.LinuxResources) -> api.UpdatePodSandboxResponse:
        """kubelet's UpdatePodSandboxResources as containerd 2.2+ passes it on (NRI v0.10+):
        UpdatePodSandbox, to a plugin subscribed to it; the pod's resources change once the
        plugin answered (a plugin's error fails the call: raised, nothing changed)."""
        p = self.pods[pod_id]
        reply = api.UpdatePodSandboxResponse()
        configured = self.session.configured
        if configured is not None and configured.events & (1 << (api.UPDATE_POD_SANDBOX - 1)):
            reply = await self.call("UpdatePodSandbox", api.UpdatePodSandboxRequest(
                pod=p, linux_resources=resources), api.UpdatePodSandboxResponse)
        p.linux.pod_resources.CopyFrom(resources)
        return reply

    def _apply_updates(self, updates: list[api.ContainerUpdate], call: str = "") -> list[api.ContainerUpdate]:
        """As containerd's domainTable.updateContainers: an unknown container is skipped; one
        being removed fails its update, which fails the plugin's `call` (the event whose
        reply carried it) unless the update is marked ignore_failure. Returns the failed."""
        failed = [u for u in updates if u.container_id in self.removing and not u.ignore_failure]
        if failed and call:
            raise RuntimeError(f"{call}: NRI update of some containers failed: "
                               f"{', '.join(u.container_id for u in failed)} in removing state")
        for u in updates:
            c = self.containers.get(u.container_id)
            if c is None or u.container_id in self.removing:
                continue
            cpu = u.linux.resources.cpu
            if cpu.cpus:
                c.linux.resources.cpu.cpus = cpu.cpus
                if u.container_id in self.running:
                    self.real[u.container_id] = cpu.cpus
            if cpu.mems:
                c.linux.resources.cpu.mems = cpu.mems
        return failed

    def cpus(self, cid: str) -> str:
        """The cpuset of the container's spec."""
        return self.containers[cid].linux.resources.cpu.cpus

    def real_cpus(self, cid: str) -> str:
        """The cpuset of its task's cgroup; a container the double did not start has the spec's."""
        return self.real.get(cid, self.cpus(cid))


# -- building pods and containers as kubelet would have them ----------------------------------------

def pod(pod_id: str, qos: str = "burstable", namespace: str = "default") -> api.PodSandbox:
    parent = {"guaranteed": f"/kubepods/pod{pod_id}", "burstable": f"/kubepods/burstable/pod{pod_id}",
              "besteffort": f"/kubepods/besteffort/pod{pod_id}"}[qos]
    return api.PodSandbox(id=pod_id, name=f"pod-{pod_id}", uid=f"uid-{pod_id}", namespace=namespace,
                          linux=api.LinuxPodSandbox(cgroup_parent=parent))


def container(cid: str, pod_id: str, milli_cpu: int = 0, limit_milli: int | None = None,
              memory: int | None = None, state: int = api.CONTAINER_RUNNING) -> api.Container:
    c = api.Container(id=cid, pod_sandbox_id=pod_id, name=f"ctr-{cid}", state=state)  # type: ignore[arg-type]
    r = c.linux.resources
    if milli_cpu:
        r.cpu.shares.value = milli_cpu * 1024 // 1000
    if limit_milli:
        r.cpu.period.value = 100000
        r.cpu.quota.value = limit_milli * 100
    if memory:
        r.memory.limit.value = memory
    return c


def guaranteed(cid: str, pod_id: str, cpus: int) -> api.Container:
    return container(cid, pod_id, milli_cpu=cpus * 1000, limit_milli=cpus * 1000, memory=1 << 28)


async def closing(double: RuntimeDouble) -> None:
    with contextlib.suppress(Exception):
        await double.close()
