"""The NRI Plugin service: each runtime event, handed to the engine as the CRI
call it stands for.

The engine's interceptors (`engine/resmgr.py`) decide on CRI requests and
"forward" them to the runtime. Here a hook builds the CRI request from the NRI
event, and its `forward` only records what would have been sent: the policy's
rewrite of a CreateContainer is the container's `ContainerAdjustment`, of an
UpdateContainerResources the update that keeps the policy's cpuset. Updates the
decision causes for other containers are collected into the hook's reply
(`NriRuntime.collect`). A hook never fails the runtime's call because of the
policy: a failure is logged and counted, and the reply is left empty.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import Message

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.view import NriRuntime, container_config, cpuset_update, cri_resources, sandbox_config
from cri_resmgr.transport.contract import (
    UNCHANGED,
    DumpSink,
    InterceptError,
    InterceptionTable,
    Interceptor,
    Keep,
    Request,
)

log = logging.getLogger(__name__)

V1 = "/runtime.v1.RuntimeService/"
# Updates the decision caused go into the hook's reply if they are ready by then;
# the rest are sent with UpdateContainers afterwards.
FLUSH_TIMEOUT = 0.5
# A hook answers within this share of the runtime's request timeout (2 s by default),
# decision or not: the runtime never waits on the policy.
HOOK_SHARE = 0.75

# The events the plugin subscribes to (Configure): a bit per Event, (1 << (event - 1)).
EVENTS = (api.RUN_POD_SANDBOX, api.STOP_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.CREATE_CONTAINER,
          api.START_CONTAINER, api.UPDATE_CONTAINER, api.STOP_CONTAINER, api.REMOVE_CONTAINER)


def event_mask(events: tuple[int, ...] = EVENTS) -> int:
    mask = 0
    for e in events:
        mask |= 1 << (e - 1)
    return mask


@dataclass
class HookCounts:
    calls: int = 0
    failed: int = 0  # the engine raised: the reply was left empty


class Hooks:
    """The plugin service's handlers, and the engine's `Feed`: the controller hands
    it the interceptors of the policy in force and the dumper."""

    def __init__(self, runtime: NriRuntime, flush: Callable[[], Awaitable[None]],
                 on_synchronize: Callable[[], Awaitable[None]] | None = None,
                 on_configure: Callable[[], Awaitable[None]] | None = None,
                 on_unknown: Callable[[str], None] | None = None):
        self._runtime = runtime
        self._flush = flush
        # Configure activates the plugin (its configuration, so its policy, in force):
        # a runtime may never send Synchronize (containerd before 1.7.26 to plugins it
        # launched), which then reconciles with what the runtime reports.
        self.on_configure = on_configure
        self.on_synchronize = on_synchronize
        # An event named a running container the plugin had not heard of (it predates
        # the plugin, or its creation was never reported: containerd#13698): the id.
        self.on_unknown = on_unknown
        self._interceptors: InterceptionTable = {}
        self.dumper: DumpSink | None = None
        self._lock = asyncio.Lock()  # one hook at a time, so collected updates reach the right reply
        self._sync_parts: tuple[list[api.PodSandbox], list[api.Container]] | None = None
        self._sync_started = 0.0  # monotonic time of a Synchronize's first part
        self.runtime_config = ""  # ConfigureRequest.config, see `configure`
        # -nri-runtime-classes: a container's (blockio, rdt) classes by id, named in its adjustment.
        self.classes_of: Callable[[str], tuple[str | None, str | None]] | None = None
        self.counts = HookCounts()
        self.request_timeout = 2.0  # the runtime's, from Configure
        self.shutdown = asyncio.Event()
        self._late_sends: set[asyncio.Future[None]] = set()  # held until done: the loop keeps weak references

    # -- Feed ----------------------------------------------------------------------------

    def reconfigure(self, *, interceptors: InterceptionTable | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None:
        if interceptors is not UNCHANGED:
            self._interceptors = interceptors
        if dumper is not UNCHANGED:
            self.dumper = dumper

    # -- configuration and synchronization ------------------------------------------------------

    async def configure(self, req: api.ConfigureRequest) -> api.ConfigureResponse:
        log.info("configured by %s %s (NRI %s): registration timeout %d ms, request timeout %d ms",
                 req.runtime_name or "the runtime", req.runtime_version, req.NRI_version or "before v0.7",
                 req.registration_timeout, req.request_timeout)
        self._runtime.runtime_name, self._runtime.runtime_version = req.runtime_name, req.runtime_version
        # The text of the runtime's configuration file for this plugin (NRI reads one for
        # the plugins it launches); the first Synchronize takes it as a fallback configuration.
        self.runtime_config = req.config
        if req.request_timeout > 0:
            self.request_timeout = req.request_timeout / 1000
        self._sync_parts = None  # a new session: parts of a Synchronize the last one cut short are stale
        self._runtime.configured()
        if self.on_configure is not None:
            async with self._lock:
                work = asyncio.ensure_future(self._guarded("Configure", self.on_configure))
                deadline = self.request_timeout * HOOK_SHARE
                try:
                    await asyncio.wait_for(asyncio.shield(work), deadline)
                except TimeoutError:
                    log.warning("activating takes longer than %gs: answering Configure before it is done", deadline)
        return api.ConfigureResponse(events=event_mask())

    async def _guarded(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        try:
            await fn()
        except Exception as e:  # the runtime still gets its answer
            self._failed(name, e)

    async def synchronize(self, req: api.SynchronizeRequest) -> api.SynchronizeResponse:
        """The runtime's pods and containers; in parts (`more`) from newer runtimes."""
        if self._sync_parts is None:
            self._sync_started = time.monotonic()
        pods, containers = self._sync_parts or ([], [])
        pods += req.pods
        containers += req.containers
        if req.more:
            self._sync_parts = (pods, containers)
            return api.SynchronizeResponse(more=True)
        self._sync_parts = None
        log.info("synchronizing with the runtime: %d pods, %d containers", len(pods), len(containers))
        async with self._lock:
            self._runtime.synchronize(pods, containers)
            self._runtime.collect()
            work = asyncio.ensure_future(self._synchronized())
            deadline = self.sync_deadline(time.monotonic())
            try:
                await asyncio.wait_for(asyncio.shield(work), deadline)
            except TimeoutError:
                # The runtime gets what is ready; the rest goes out with UpdateContainers.
                log.warning("synchronizing takes longer than %gs: answering with what is ready", deadline)
            finally:
                updates = self._runtime.collected()
        if updates:
            log.info("synchronized: %d containers get new CPUs", len(updates))
        return api.SynchronizeResponse(update=updates)

    def sync_deadline(self, now: float) -> float:
        """Seconds left to answer a Synchronize: NRI gives all its parts one request
        timeout together, so the time the earlier parts took is already spent."""
        return max(self.request_timeout * HOOK_SHARE - (now - self._sync_started), 0.01)

    async def _synchronized(self) -> None:
        try:
            if self.on_synchronize is not None:
                await self.on_synchronize()
            await self._flushed()
        except Exception as e:  # adoption failed: the runtime still gets its answer
            self._failed("Synchronize", e)

    async def shutdown_requested(self, req: api.Empty) -> api.Empty:
        log.info("the runtime is shutting down")
        self.shutdown.set()
        return api.Empty()

    # -- pods ------------------------------------------------------------------------------

    async def run_pod(self, req: api.RunPodSandboxRequest) -> api.RunPodSandboxResponse:
        self._runtime.pod(req.pod)
        await self._hook("RunPodSandbox", pb.RunPodSandboxRequest(config=sandbox_config(req.pod)),
                         pb.RunPodSandboxResponse(pod_sandbox_id=req.pod.id), collect=False)
        return api.RunPodSandboxResponse()

    async def stop_pod(self, req: api.StopPodSandboxRequest) -> api.StopPodSandboxResponse:
        self._runtime.pod_stopped(req.pod)
        # No updates in this reply (nor in the other pod events'): releasing the pod's
        # containers changes the others with UpdateContainers.
        await self._hook("StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=req.pod.id),
                         pb.StopPodSandboxResponse(), collect=False)
        return api.StopPodSandboxResponse()

    async def remove_pod(self, req: api.RemovePodSandboxRequest) -> api.RemovePodSandboxResponse:
        await self._hook("RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=req.pod.id),
                         pb.RemovePodSandboxResponse(), collect=False)
        self._runtime.pod_removed(req.pod.id)
        return api.RemovePodSandboxResponse()

    # -- containers ---------------------------------------------------------------------------

    async def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        c = req.container
        self._runtime.pod(req.pod)
        self._runtime.container(c, api.CONTAINER_CREATED)
        cri = pb.CreateContainerRequest(pod_sandbox_id=c.pod_sandbox_id, config=container_config(c),
                                        sandbox_config=sandbox_config(req.pod))
        sent, updates = await self._hook("CreateContainer", cri, pb.CreateContainerResponse(container_id=c.id),
                                         container_id=c.id)
        reply = api.CreateContainerResponse(update=[u for u in updates if u.container_id != c.id])
        if isinstance(sent, pb.CreateContainerRequest):
            _adjust(reply.adjust, c.linux.resources.cpu, sent.config.linux.resources)
            if self.classes_of is not None:
                blockio, rdt = self.classes_of(c.id)
                if blockio:
                    reply.adjust.linux.resources.blockio_class.value = blockio
                if rdt:
                    reply.adjust.linux.resources.rdt_class.value = rdt
        return reply

    def _heard_of(self, pod: api.PodSandbox, c: api.Container, state: int | None = None) -> None:
        """Records what an event says of a container; one the plugin had not heard of
        (not a CreateContainer's) is reported to `on_unknown`."""
        known = self._runtime.knows(c.id)
        self._runtime.pod(pod)
        self._runtime.container(c, state)
        stopped = (state if state is not None else c.state) == api.CONTAINER_STOPPED
        if not known and not stopped and c.id and self.on_unknown is not None:
            self.on_unknown(c.id)

    async def start_container(self, req: api.StartContainerRequest) -> api.StartContainerResponse:
        self._heard_of(req.pod, req.container, api.CONTAINER_RUNNING)
        await self._hook("StartContainer", pb.StartContainerRequest(container_id=req.container.id),
                         pb.StartContainerResponse(), collect=False)
        return api.StartContainerResponse()

    async def update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """kubelet's update, with the policy's cpuset kept."""
        c = req.container
        self._heard_of(req.pod, c)
        cri = pb.UpdateContainerResourcesRequest(container_id=c.id,
                                                 linux=cri_resources(req.linux_resources))
        try:
            sent, updates = await self._hook("UpdateContainerResources", cri, pb.UpdateContainerResourcesResponse())
        except InterceptError as e:  # a resize the policy cannot meet: the runtime fails the update
            raise ttrpc.TtrpcError(ttrpc.Code.RESOURCE_EXHAUSTED, e.message) from None
        reply = api.UpdateContainerResponse(update=[u for u in updates if u.container_id != c.id])
        own = [u for u in updates if u.container_id == c.id]
        cpu = req.linux_resources.cpu
        if isinstance(sent, pb.UpdateContainerResourcesRequest) and \
                (sent.linux.cpuset_cpus, sent.linux.cpuset_mems) != (cpu.cpus, cpu.mems):
            # Only the cpuset: NRI applies it over kubelet's request, and each field a
            # plugin sets is claimed as its own (another plugin setting it fails the update).
            reply.update.append(cpuset_update(c.id, sent.linux))
        elif own:  # adopted meanwhile (it was unknown): its placement goes over kubelet's request too
            reply.update.append(own[-1])
        return reply

    async def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        self._heard_of(req.pod, req.container, api.CONTAINER_STOPPED)
        _, updates = await self._hook("StopContainer", pb.StopContainerRequest(container_id=req.container.id),
                                      pb.StopContainerResponse())
        return api.StopContainerResponse(update=[u for u in updates if u.container_id != req.container.id])

    async def remove_container(self, req: api.RemoveContainerRequest) -> api.RemoveContainerResponse:
        # No updates in this reply: what the release changes goes out with UpdateContainers.
        await self._hook("RemoveContainer", pb.RemoveContainerRequest(container_id=req.container.id),
                         pb.RemoveContainerResponse(), collect=False)
        self._runtime.container_removed(req.container.id)
        return api.RemoveContainerResponse()

    async def state_change(self, evt: api.StateChangeEvent) -> api.Empty:
        """Older runtimes (NRI before v0.8 or so) send some events only this way."""
        if evt.event == api.RUN_POD_SANDBOX:
            await self.run_pod(api.RunPodSandboxRequest(pod=evt.pod))
        elif evt.event == api.STOP_POD_SANDBOX:
            await self.stop_pod(api.StopPodSandboxRequest(pod=evt.pod))
        elif evt.event == api.REMOVE_POD_SANDBOX:
            await self.remove_pod(api.RemovePodSandboxRequest(pod=evt.pod))
        elif evt.event == api.START_CONTAINER:
            await self.start_container(api.StartContainerRequest(pod=evt.pod, container=evt.container))
        elif evt.event == api.REMOVE_CONTAINER:
            await self.remove_container(api.RemoveContainerRequest(pod=evt.pod, container=evt.container))
        return api.Empty()

    # -- the engine ------------------------------------------------------------------------------

    async def _hook(self, name: str, message: Message, reply: Message, collect: bool = True,
                    container_id: str = "") -> tuple[Message | None, list[api.ContainerUpdate]]:
        """Runs the interceptor for `name`, if the policy in force has one: the
        request as it would have been sent on (None: not intercepted, failed or too
        late), and the updates to other containers the decision caused. A decision
        later than HOOK_SHARE of the runtime's timeout is not waited for: the runtime
        gets an empty reply in time, and the decision, once made, goes out with
        UpdateContainers."""
        interceptor = self._interceptors.get(name)
        self.counts.calls += 1
        if interceptor is None:
            return None, []
        work = asyncio.ensure_future(self._decide(interceptor, name, message, reply, collect))
        deadline = self.request_timeout * HOOK_SHARE
        try:
            return await asyncio.wait_for(asyncio.shield(work), deadline)
        except TimeoutError:
            self._failed(name, TimeoutError(f"no decision within {deadline:g}s"))
            work.add_done_callback(lambda done: self._late(done, container_id))
            return None, []

    async def _decide(self, interceptor: Interceptor, name: str, message: Message, reply: Message,
                      collect: bool) -> tuple[Message | None, list[api.ContainerUpdate]]:
        sent: list[Message] = []

        async def forward(m: Message) -> Message:
            sent.append(m)
            return reply

        async with self._lock:
            if collect:
                self._runtime.collect()
            try:
                await interceptor(Request(name=name, path=V1 + name, message=message, forward=forward))
                if collect:
                    await self._flushed()
            except Exception as e:  # the policy's failure (fail-closed included) never fails the runtime
                if isinstance(e, InterceptError) and e.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise  # but a resize it cannot meet does: nothing was changed (engine/resmgr.py)
                self._failed(name, e)
                sent.clear()
            finally:
                updates = self._runtime.collected() if collect else []
        return (sent[-1] if sent else None), updates

    def _late(self, done: asyncio.Future[tuple[Message | None, list[api.ContainerUpdate]]],
              container_id: str) -> None:
        """A decision that missed its hook's reply: sent unsolicited."""
        if done.cancelled() or done.exception() is not None:
            return
        sent, updates = done.result()
        if container_id and isinstance(sent, pb.CreateContainerRequest):
            updates = [*updates, cpuset_update(container_id, sent.config.linux.resources)]
        if updates:
            log.warning("sending %d late container updates with UpdateContainers", len(updates))
            sending = asyncio.ensure_future(self._runtime.push(updates))
            self._late_sends.add(sending)
            sending.add_done_callback(self._late_sends.discard)

    async def _flushed(self) -> None:
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._flush(), FLUSH_TIMEOUT)
        except TimeoutError:
            log.warning("container updates not ready after %.1fs: sending them with UpdateContainers",
                        time.monotonic() - started)

    def _failed(self, name: str, e: Exception) -> None:
        self.counts.failed += 1
        log.error("NRI %s: the engine failed (%s: %s); the runtime gets no adjustment", name, type(e).__name__, e)


def _adjust(adjust: api.ContainerAdjustment, had: api.LinuxCPU, sent: pb.LinuxContainerResources) -> None:
    """The policy's cpuset as the container's adjustment, when it changed anything."""
    if sent.cpuset_cpus and sent.cpuset_cpus != had.cpus:
        adjust.linux.resources.cpu.cpus = sent.cpuset_cpus
    if sent.cpuset_mems and sent.cpuset_mems != had.mems:
        adjust.linux.resources.cpu.mems = sent.cpuset_mems
