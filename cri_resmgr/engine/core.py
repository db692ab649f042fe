"""What a front end hands the engine for each runtime event, in the engine's own forms.

Both front ends call the engine through this surface: the relay's CRI adapter
(`engine/cri.py`) decodes kubelet's requests into these forms, the NRI plugin's
hooks (`nri/hooks.py`) its runtime's events. The engine (`engine/resmgr.py`'s
`ResourceManager`, or `engine/classes.py`'s `ClassesOnly` under the none policy)
keeps its bookkeeping and returns its decisions: the policy's `Resources` for a
container, or one of the errors below. What the runtime must do in between (create
the container, start it) is a step the front end gives in, so the engine's
bookkeeping brackets it as it must (a create the runtime refuses is released).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.cache import PodRecord
from cri_resmgr.engine.classify import Requirements
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.policy.api import Resources

# The runtime's part of a create: given the policy's resources for the container (None:
# none to set), creates it and returns its id. Raises what the runtime's refusal is.
CreateStep = Callable[[Resources | None], Awaitable[str]]
# The runtime's part of a start (the engine's bookkeeping waits for it).
StartStep = Callable[[], Awaitable[None]]
# The runtime's part of an update, given the resources the policy keeps (None: none to keep).
UpdateStep = Callable[[Resources | None], Awaitable[None]]
# The runtime's part of a pod's resize (kubelet's UpdatePodSandboxResources, NRI's UpdatePodSandbox).
PodResizeStep = Callable[[], Awaitable[None]]

# The events a core may take, by their CRI method names (NRI's events bear the same).
POD_EVENTS = frozenset({"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "UpdatePodSandboxResources"})
CONTAINER_EVENTS = frozenset({"CreateContainer", "StartContainer", "StopContainer", "RemoveContainer",
                              "UpdateContainerResources"})
# Not an event of its own: that the core wants to hear of containers seen exited
# (crash detection: the relay reads kubelet's ListContainers and ContainerStatus replies).
EXITS = "exits"


class PolicyFailed(CriResmgrError):
    """The policy failed on a container under FailClosed: the runtime's call fails."""

    def __init__(self, policy: str, why: str):
        super().__init__(f"cri-resmgr policy {policy}: {why}")
        self.message = str(self)


class ResizeRefused(CriResmgrError):
    """A resize the policy cannot meet: the runtime's update fails with this message,
    nothing moved (kubelet shows it in the pod's resize status and retries)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ContainerSpec:
    """A container about to be created, as the engine reads it. `pod`: its pod as the
    create describes it (used for a pod the engine has not seen run). `resources`: its
    resources in the form the engine records and updates them in (CRI's
    LinuxContainerResources, which the state file keeps as JSON)."""

    pod: PodRecord
    name: str
    attempt: int
    resources: pb.LinuxContainerResources
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_resources: Requirements | None = None  # pod-level resources (KEP-2837)

    @property
    def key(self) -> str:
        """The policy's key: stable from before the runtime gives the container an id."""
        return f"{self.pod.id}:{self.name}:{self.attempt}"


class Core(Protocol):
    """The engine as the front ends call it. `events`: which of the runtime's events
    it takes (the others it need not hear of: the relay passes them on unread)."""

    @property
    def events(self) -> frozenset[str]: ...

    async def pod_started(self, pod: PodRecord) -> None:
        """A pod the runtime has run (its id is the runtime's)."""

    async def pod_stopped(self, pod_id: str) -> None: ...

    async def pod_removed(self, pod_id: str) -> None: ...

    async def pod_resized(self, pod_id: str, resources: Requirements | None, send: PodResizeStep) -> None:
        """kubelet's resize of a pod (its new pod-level resources): the container that
        takes its size from the pod (engine/podsize.py) is re-decided first, then the
        runtime is told (`send`), then the containers whose CPUs changed are updated.
        Raises `ResizeRefused` (nothing moved, `send` not called) or `PolicyFailed`."""

    async def create(self, spec: ContainerSpec, create: CreateStep) -> Resources | None:
        """Decides on a new container, has the runtime create it (`create`), and returns
        the resources it was created with (None: the policy sets none). Raises
        `PolicyFailed` (FailClosed), or what `create` raised, with nothing kept."""

    async def start(self, container_id: str, start: StartStep) -> None: ...

    async def stopped(self, container_id: str) -> None:
        """The runtime stopped the container: its CPUs are released."""

    async def removed(self, container_id: str) -> None:
        """The runtime removed the container, or does not know it: forgotten."""

    async def update(self, container_id: str, linux: pb.LinuxContainerResources | None,
                     send: UpdateStep) -> Resources | None:
        """kubelet's update of a container's resources: re-decided when it resizes the
        container, then sent (`send`) with the policy's fields kept; returns those
        (None: the policy keeps none). Raises `ResizeRefused` or `PolicyFailed`."""

    def on_exit(self, ids: list[str]) -> Awaitable[None] | None:
        """Containers seen exited: what to wait for while they are released (None: nothing)."""

    def holding(self, ids: list[str]) -> list[str]:
        """Of these containers, those that still hold what the policy gave them: what
        `on_exit` would release. No side effect; a streamed listing keeps only these
        until it is complete."""


def write_cpuset(linux: pb.LinuxContainerResources, r: Resources) -> None:
    """Sets the policy's fields in a container's resources (a CPUSet formats its text
    once: a change of the shared pool gives a thousand containers the same one)."""
    linux.cpuset_cpus = str(r.cpuset_cpus)
    if r.cpuset_mems is not None:
        linux.cpuset_mems = r.cpuset_mems


class Bystander:
    """A core that takes no event (the base of one that takes a few)."""

    @property
    def events(self) -> frozenset[str]:
        return frozenset()

    async def pod_started(self, pod: PodRecord) -> None:
        return None

    async def pod_stopped(self, pod_id: str) -> None:
        return None

    async def pod_removed(self, pod_id: str) -> None:
        return None

    async def pod_resized(self, pod_id: str, resources: Requirements | None, send: PodResizeStep) -> None:
        await send()

    async def create(self, spec: ContainerSpec, create: CreateStep) -> Resources | None:
        await create(None)
        return None

    async def start(self, container_id: str, start: StartStep) -> None:
        await start()

    async def stopped(self, container_id: str) -> None:
        return None

    async def removed(self, container_id: str) -> None:
        return None

    async def update(self, container_id: str, linux: pb.LinuxContainerResources | None,
                     send: UpdateStep) -> Resources | None:
        await send(None)
        return None

    def on_exit(self, ids: list[str]) -> Awaitable[None] | None:
        return None

    def holding(self, ids: list[str]) -> list[str]:
        return []
