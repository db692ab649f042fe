"""The NRI Plugin service: each runtime event, handed to the engine's core in its own forms.

A hook turns the NRI event into what the engine's core (`engine/core.py`) takes (a
pod record, a container spec, an id), calls it, and turns its decision into the
reply: the policy's cpuset for a new container is its `ContainerAdjustment`, for an
UpdateContainer the update that keeps the policy's cpuset. The runtime's own part
(creating, starting the container) comes after the reply, so the step the core is
given does nothing. Updates the decision causes for other containers are collected
into the hook's reply where NRI lets it carry them (CreateContainer, UpdateContainer,
StopContainer, Synchronize); the other hooks' are carried to the next such reply or
sent with UpdateContainers after theirs (`NriRuntime.carry`, `delivery.py`). An update
of a container whose creation or start is in flight waits for its PostStartContainer
(`NriRuntime.launching`). A hook never fails the runtime's call
because of the policy: a failure is logged and counted, and the reply is left empty;
only a resize the policy cannot meet fails the update.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.engine import classify
from cri_resmgr.engine.cache import PodRecord
from cri_resmgr.engine.core import ContainerSpec, Core, ResizeRefused
from cri_resmgr.nri import schedadjust, ttrpc
from cri_resmgr.nri.view import NriRuntime, attempt, cri_resources
from cri_resmgr.policy.api import Resources
from cri_resmgr.policy.schedclass import SchedClass
from cri_resmgr.transport.contract import UNCHANGED, DumpSink, Keep

log = logging.getLogger(__name__)

# Updates the decision caused go into the hook's reply if they are ready by then;
# the rest are sent with UpdateContainers after the reply.
FLUSH_TIMEOUT = 0.5
# A hook answers within this share of the runtime's request timeout (2 s by default),
# decision or not: the runtime never waits on the policy.
HOOK_SHARE = 0.75

# The events the plugin subscribes to (Configure): a bit per Event, (1 << (event - 1)).
# PostStartContainer: the moment an update reaches a new container's cgroup (`post_start_container`).
# PostCreateContainer and PostUpdateContainer are answered empty, but the runtime holds its
# NRI lock for every event, subscribed or not: seen, they keep UpdateContainers out of them
# (nri/delivery.py).
EVENTS = (api.RUN_POD_SANDBOX, api.STOP_POD_SANDBOX, api.REMOVE_POD_SANDBOX, api.CREATE_CONTAINER,
          api.POST_CREATE_CONTAINER, api.START_CONTAINER, api.POST_START_CONTAINER, api.UPDATE_CONTAINER,
          api.POST_UPDATE_CONTAINER, api.STOP_CONTAINER, api.REMOVE_CONTAINER)


# Subscribed to where the runtime has it (NRI v0.10, containerd 2.2): containerd 2.1 and
# older refuse a plugin whose mask has bits they do not know ("invalid plugin events: 0x1800").
POD_RESIZE_EVENTS = (api.UPDATE_POD_SANDBOX,)
POD_RESIZE_SINCE = {"NRI": (0, 10), "containerd": (2, 2)}


def _version(text: str) -> tuple[int, int] | None:
    """(major, minor) of "v0.10.0", "2.2.1+ds1", "1.7.24~ds1"; None when none can be read."""
    parts = text.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        return None


def pod_resize_support(req: api.ConfigureRequest) -> tuple[bool, str]:
    """Whether the runtime has UpdatePodSandbox, from what its Configure says (the NRI
    version newer runtimes send; else the runtime's name and version), and why."""
    nri = _version(req.NRI_version) if req.NRI_version else None
    if nri is not None:
        has = nri >= POD_RESIZE_SINCE["NRI"]
        return has, f"NRI {req.NRI_version} {'has' if has else 'predates'} it (since v0.10)"
    if req.runtime_name == "containerd":
        found = _version(req.runtime_version)
        if found is not None:
            has = found >= POD_RESIZE_SINCE["containerd"]
            return has, f"containerd {req.runtime_version} {'has' if has else 'predates'} it (since 2.2)"
    who = f"{req.runtime_name or 'the runtime'} {req.runtime_version}".strip()
    return False, f"{who} does not say it has it (no NRI version; known: containerd 2.2+, NRI v0.10+)"


def event_mask(events: tuple[int, ...] = EVENTS) -> int:
    mask = 0
    for e in events:
        mask |= 1 << (e - 1)
    return mask


@dataclass
class Outcome:
    """What a hook got of the engine: whether it decided (False: not its event, failed
    or too late), the policy's resources for the container, and the updates of the
    others the decision caused."""

    decided: bool = False
    resources: Resources | None = None
    updates: list[api.ContainerUpdate] = field(default_factory=list)


@dataclass
class HookCounts:
    calls: int = 0
    failed: int = 0  # the engine raised: the reply was left empty


class Hooks:
    """The plugin service's handlers, and the engine's `Feed`: the controller hands
    it the engine's core in force and the dumper."""

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
        self._engine: Core | None = None
        self.dumper: DumpSink | None = None
        self._lock = asyncio.Lock()  # one hook at a time, so collected updates reach the right reply
        self._sync_parts: tuple[list[api.PodSandbox], list[api.Container]] | None = None
        self._sync_started = 0.0  # monotonic time of a Synchronize's first part
        self.runtime_config = ""  # ConfigureRequest.config, see `configure`
        # -nri-runtime-classes: a container's (blockio, rdt) classes by id, named in its adjustment.
        self.classes_of: Callable[[str], tuple[str | None, str | None]] | None = None
        # -nri-runtime-classes: a new container's scheduling class, for its adjustment.
        self.sched_of: Callable[[str], SchedClass | None] | None = None
        self.counts = HookCounts()
        self.request_timeout = 2.0  # the runtime's, from Configure
        self.shutdown = asyncio.Event()

    # -- Feed ----------------------------------------------------------------------------

    def reconfigure(self, *, engine: Core | None | Keep = UNCHANGED,
                    dumper: DumpSink | None | Keep = UNCHANGED) -> None:
        if engine is not UNCHANGED:
            self._engine = engine
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
        self._runtime.delivery.synchronizing(False)
        self._runtime.configured()
        if self.on_configure is not None:
            async with self._lock:
                work = asyncio.ensure_future(self._guarded("Configure", self.on_configure))
                deadline = self.request_timeout * HOOK_SHARE
                try:
                    await asyncio.wait_for(asyncio.shield(work), deadline)
                except TimeoutError:
                    log.warning("activating takes longer than %gs: answering Configure before it is done", deadline)
        pod_resize, why = pod_resize_support(req)
        log.info("%s UpdatePodSandbox (pod-level resize): %s", "subscribing to" if pod_resize else "not subscribing to",
                 why)
        return api.ConfigureResponse(events=event_mask(EVENTS + POD_RESIZE_EVENTS if pod_resize else EVENTS))

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
            self._runtime.delivery.synchronizing(True)  # the runtime holds its lock until the last part
            return api.SynchronizeResponse(more=True)
        self._sync_parts = None
        self._runtime.delivery.synchronizing(False)
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
        return api.SynchronizeResponse(update=_others(updates, ""))

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
        pod = pod_record(req.pod)
        await self._hook("RunPodSandbox", lambda core: core.pod_started(pod), carries=False)
        return api.RunPodSandboxResponse()

    async def stop_pod(self, req: api.StopPodSandboxRequest) -> api.StopPodSandboxResponse:
        self._runtime.pod_stopped(req.pod)
        for c in self._runtime.pod_containers(req.pod.id):
            self._runtime.stopped(c)
        # No updates in this reply (nor in the other pod events'): what releasing the pod's
        # containers changes for the others is carried (`NriRuntime.carry`).
        await self._hook("StopPodSandbox", lambda core: core.pod_stopped(req.pod.id), carries=False)
        return api.StopPodSandboxResponse()

    async def remove_pod(self, req: api.RemovePodSandboxRequest) -> api.RemovePodSandboxResponse:
        await self._hook("RemovePodSandbox", lambda core: core.pod_removed(req.pod.id), carries=False)
        self._runtime.pod_removed(req.pod.id)
        return api.RemovePodSandboxResponse()

    async def update_pod(self, req: api.UpdatePodSandboxRequest) -> api.UpdatePodSandboxResponse:
        """kubelet's resize of a pod (NRI v0.10+): the container that takes the pod's size
        is resized first. NRI's reply has no updates: the resized container's and the
        others' go out with UpdateContainers once the reply is sent. A size that cannot be
        met fails the runtime's call (kubelet keeps the old size), nothing moved."""
        self._runtime.pod(req.pod)
        resources = _requirements(req.linux_resources) if req.HasField("linux_resources") else None
        try:
            out = await self._hook("UpdatePodSandboxResources",
                                   lambda core: _none(core.pod_resized(req.pod.id, resources, _nothing)))
        except ResizeRefused as e:
            raise ttrpc.TtrpcError(ttrpc.Code.RESOURCE_EXHAUSTED, e.message) from None
        if out.updates:  # sent once this reply is out (nri/delivery.py)
            self._runtime.push(out.updates)
        return api.UpdatePodSandboxResponse()

    # -- containers ---------------------------------------------------------------------------

    async def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        c = req.container
        self._runtime.pod(req.pod)
        self._runtime.container(c, api.CONTAINER_CREATED)
        self._runtime.launching(c.id)  # until its PostStartContainer, updates of it wait
        spec = container_spec(req.pod, c)
        had = c.linux.resources.cpu

        async def created(placed: Resources | None) -> str:
            return c.id  # the runtime creates it after this hook's reply, with the adjustment

        out = await self._hook("CreateContainer", lambda core: core.create(spec, created),
                               late=lambda r: _cpuset_update(c.id, r, had))
        reply = api.CreateContainerResponse(update=_others(out.updates, c.id))
        if out.decided:
            if out.resources is not None:
                _adjust(reply.adjust, had, out.resources)
            if self.classes_of is not None:
                blockio, rdt = self.classes_of(c.id)
                if blockio:
                    reply.adjust.linux.resources.blockio_class.value = blockio
                if rdt:
                    reply.adjust.linux.resources.rdt_class.value = rdt
            if self.sched_of is not None:
                sched = self.sched_of(c.id)
                if sched is not None:
                    schedadjust.adjust(reply.adjust.linux, sched)
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
        await self._hook("StartContainer", lambda core: core.start(req.container.id, _nothing), carries=False)
        return api.StartContainerResponse()

    async def post_start_container(self, req: api.PostStartContainerRequest) -> api.PostStartContainerResponse:
        """Its task runs: an update now reaches its cgroup. What was decided for it while
        it was being created or started goes out after this reply (NriRuntime.started)."""
        self._heard_of(req.pod, req.container, api.CONTAINER_RUNNING)
        self._runtime.started(req.container.id)
        return api.PostStartContainerResponse()

    async def update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """kubelet's update, with the policy's cpuset kept."""
        c = req.container
        self._heard_of(req.pod, c)
        linux = cri_resources(req.linux_resources)  # the update as the engine records resources
        try:
            out = await self._hook("UpdateContainerResources", lambda core: core.update(c.id, linux, _keep))
        except ResizeRefused as e:  # a resize the policy cannot meet: the runtime fails the update
            raise ttrpc.TtrpcError(ttrpc.Code.RESOURCE_EXHAUSTED, e.message) from None
        reply = api.UpdateContainerResponse(update=_others(out.updates, c.id))
        own = [u for u in out.updates if u.container_id == c.id]
        cpu = req.linux_resources.cpu
        keep = _cpuset_update(c.id, out.resources, cpu) if out.resources is not None else None
        if keep is not None and (keep.linux.resources.cpu.cpus, keep.linux.resources.cpu.mems) != (cpu.cpus, cpu.mems):
            # Only the cpuset: NRI applies it over kubelet's request, and each field a
            # plugin sets is claimed as its own (another plugin setting it fails the update).
            reply.update.append(keep)
        elif own:  # adopted meanwhile (it was unknown): its placement goes over kubelet's request too
            reply.update.append(own[-1])
        return reply

    async def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        self._heard_of(req.pod, req.container, api.CONTAINER_STOPPED)
        self._runtime.stopped(req.container.id)
        out = await self._hook("StopContainer", lambda core: core.stopped(req.container.id))
        return api.StopContainerResponse(update=_others(out.updates, req.container.id))

    async def remove_container(self, req: api.RemoveContainerRequest) -> api.RemoveContainerResponse:
        # No updates in this reply: what the release changes is carried (`NriRuntime.carry`).
        await self._hook("RemoveContainer", lambda core: core.removed(req.container.id), carries=False)
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
        elif evt.event == api.POST_START_CONTAINER:
            await self.post_start_container(api.PostStartContainerRequest(pod=evt.pod, container=evt.container))
        elif evt.event == api.REMOVE_CONTAINER:
            await self.remove_container(api.RemoveContainerRequest(pod=evt.pod, container=evt.container))
        return api.Empty()

    # -- the engine ------------------------------------------------------------------------------

    async def _hook(self, name: str, call: Callable[[Core], Awaitable[Resources | None]], carries: bool = True,
                    late: Callable[[Resources], api.ContainerUpdate] | None = None) -> Outcome:
        """Hands the event to the engine's core, if the core in force takes it. A
        decision later than HOOK_SHARE of the runtime's timeout is not waited for: the
        runtime gets an empty reply in time, and the decision, once made, goes out with
        UpdateContainers (`late`: the container's own update from its resources).
        `carries`: the hook's reply has an update list; else the updates are carried."""
        core = self._engine
        self.counts.calls += 1
        if core is None or name not in core.events:
            return Outcome()
        work = asyncio.ensure_future(self._decide(core, call, name, carries))
        deadline = self.request_timeout * HOOK_SHARE
        try:
            return await asyncio.wait_for(asyncio.shield(work), deadline)
        except TimeoutError:
            self._failed(name, TimeoutError(f"no decision within {deadline:g}s"))
            work.add_done_callback(lambda done: self._late(done, late))
            return Outcome()

    async def _decide(self, core: Core, call: Callable[[Core], Awaitable[Resources | None]], name: str,
                      carries: bool) -> Outcome:
        async with self._lock:
            self._runtime.collect()
            out = Outcome()
            refused = False
            try:
                out.resources = await call(core)
                out.decided = True
                await self._flushed()
            except ResizeRefused:
                refused = True
                raise  # a resize the policy cannot meet fails the update: nothing was changed
            except Exception as e:  # the policy's failure (fail-closed included) never fails the runtime
                self._failed(name, e)
                out = Outcome()
            finally:
                updates = self._runtime.collected()
                if refused:
                    # The runtime's call fails, with no reply to carry what this hook took
                    # from the outbox (Delivery.take): it goes out with UpdateContainers.
                    self._runtime.push(updates)
                    updates = []
                elif not carries:
                    self._runtime.carry(updates)
                    updates = []
        out.updates = updates
        return out

    def _late(self, done: asyncio.Future[Outcome], late: Callable[[Resources], api.ContainerUpdate] | None) -> None:
        """A decision that missed its hook's reply: sent unsolicited."""
        if done.cancelled() or done.exception() is not None:
            return
        out = done.result()
        updates = out.updates
        if late is not None and out.resources is not None:
            updates = [*updates, late(out.resources)]
        if updates:
            log.warning("sending %d late container updates with UpdateContainers", len(updates))
            self._runtime.push(updates)

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


async def _nothing() -> None:
    """The runtime's part of a start: after the hook's reply."""


async def _keep(keep: Resources | None) -> None:
    """The runtime's part of an update: after the hook's reply, with the cpuset it gives."""


# -- NRI's messages as the engine's forms, and its decisions as NRI's ---------------------------

def pod_record(p: api.PodSandbox, pod_id: str = "") -> PodRecord:
    return PodRecord(id=pod_id or p.id, name=p.name, namespace=p.namespace, uid=p.uid,
                     cgroup_parent=p.linux.cgroup_parent, annotations=dict(p.annotations), labels=dict(p.labels))


def pod_resources(p: api.PodSandbox) -> classify.Requirements | None:
    """The pod-level resources (KEP-2837) the runtime reports; None when the pod has none."""
    if not p.linux.HasField("pod_resources"):
        return None
    return _requirements(p.linux.pod_resources)


def _requirements(r: api.LinuxResources) -> classify.Requirements | None:
    return classify.pod_requirements(r.cpu.shares.value, max(r.cpu.quota.value, 0), r.cpu.period.value,
                                     max(r.memory.limit.value, 0))


async def _none(work: Awaitable[None]) -> Resources | None:
    await work
    return None


def container_spec(pod: api.PodSandbox, c: api.Container) -> ContainerSpec:
    return ContainerSpec(pod=pod_record(pod, c.pod_sandbox_id), name=c.name, attempt=attempt(c),
                         resources=cri_resources(c.linux.resources), annotations=c.annotations, labels=c.labels,
                         pod_resources=pod_resources(pod))


def _others(updates: list[api.ContainerUpdate], own: str) -> list[api.ContainerUpdate]:
    """The updates of the containers other than `own` for a hook's reply, each marked
    ignore_failure. containerd applies a reply's updates before it goes on with the event,
    and one that fails without the mark fails the event itself ("NRI update of some
    containers failed"): the CreateContainer of a container because another was being
    removed or stopped meanwhile (its update refused: "in removing state"), or the
    plugin's registration for a Synchronize. The failed update costs nothing then: that
    container is going away, and the reconcile checks any other."""
    out = []
    for u in updates:
        if u.container_id != own:
            marked = api.ContainerUpdate()
            marked.CopyFrom(u)
            marked.ignore_failure = True
            out.append(marked)
    return out


def _cpuset_update(container_id: str, r: Resources, had: api.LinuxCPU) -> api.ContainerUpdate:
    """An update of the fields a policy owns, the cpuset's CPUs and memory nodes (the
    container's own memory nodes when the policy sets none)."""
    cpu = api.LinuxCPU(cpus=str(r.cpuset_cpus), mems=r.cpuset_mems if r.cpuset_mems is not None else had.mems)
    return api.ContainerUpdate(container_id=container_id,
                               linux=api.LinuxContainerUpdate(resources=api.LinuxResources(cpu=cpu)))


def _adjust(adjust: api.ContainerAdjustment, had: api.LinuxCPU, r: Resources) -> None:
    """The policy's cpuset as the container's adjustment, when it changes anything."""
    cpus = str(r.cpuset_cpus)
    if cpus and cpus != had.cpus:
        adjust.linux.resources.cpu.cpus = cpus
    if r.cpuset_mems and r.cpuset_mems != had.mems:
        adjust.linux.resources.cpu.mems = r.cpuset_mems
