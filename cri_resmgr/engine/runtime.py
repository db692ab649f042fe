"""What the engine asks of the runtime, in the engine's own terms: the runtime port.

The engine adopts, reconciles, enforces and places block I/O and RDT classes through
a `RuntimePort`: typed calls that return the records below and raise `RuntimeFailure`.
Each front end brings its adapter, and the runtime's own forms stay at that edge:
the relay's (`relay.runtime.CriRuntime`) speaks CRI over its gRPC channel and reads
containerd's and CRI-O's verbose info JSON; the NRI plugin's (`nri.view.NriRuntime`)
answers from the state NRI reported and turns updates into NRI `ContainerUpdate`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.errors import CriResmgrError

# A container as the engine tells them apart: "running" (paused too), "created" (not
# started yet), "exited", "unknown" (the runtime said nothing the engine knows).
ContainerPhase = Literal["created", "running", "exited", "unknown"]

DEFAULT_TIMEOUT = 10.0


class RuntimeFailure(CriResmgrError):
    """A runtime call failed. `reason` names why in a word (the gRPC status under CRI:
    what log lines show), `details` is the runtime's message."""

    reason_default = "UNKNOWN"

    def __init__(self, details: str, reason: str | None = None):
        super().__init__(details)
        self.details = details
        self.reason = reason or self.reason_default

    def __str__(self) -> str:
        return f"{self.reason}: {self.details}"


class NotFound(RuntimeFailure):
    """The runtime has no such pod or container (gone meanwhile)."""

    reason_default = "NOT_FOUND"


class Unavailable(RuntimeFailure):
    """The runtime cannot be reached now (not connected, restarting)."""

    reason_default = "UNAVAILABLE"


@dataclass(frozen=True)
class RuntimeVersion:
    name: str
    version: str
    api_version: str  # the CRI version under CRI; "NRI" for the plugin


@dataclass(frozen=True)
class PodInfo:
    id: str
    name: str
    namespace: str
    uid: str
    ready: bool
    cgroup_parent: str = ""  # "" in a listing that does not tell it (CRI's): `RuntimePort.pod_info` does
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    pod_id: str
    name: str
    attempt: int
    state: ContainerPhase
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The engine's key of the container (cache.ContainerRecord.key)."""
        return f"{self.pod_id}:{self.name}:{self.attempt}"


@dataclass(frozen=True)
class ContainerDetail:
    """What the engine needs of one container beyond a listing: its resources as its
    runtime spec holds them (the fields the engine reads and keeps), its init pid (0:
    not told) to read its real cgroup, and its cgroups path ("": not told) for the
    block I/O and RDT classes."""

    resources: pb.LinuxContainerResources
    pid: int = 0
    cgroups_path: str = ""


class RuntimePort(Protocol):
    @property
    def path(self) -> str:
        """Where the runtime is, for log lines and /readyz."""

    @property
    def listing_complete(self) -> bool:
        """Whether `pods()` and `containers()` name everything the runtime runs. A CRI
        channel's always do. The NRI plugin's do not before the runtime's first
        Synchronize (containerd before 1.7.26 never sends one to a plugin it launched):
        then a container missing from a listing is not gone, only not heard of yet."""

    async def version(self, timeout: float = DEFAULT_TIMEOUT) -> RuntimeVersion: ...

    async def pods(self, timeout: float = DEFAULT_TIMEOUT) -> list[PodInfo]: ...

    async def pod_info(self, pod_id: str, timeout: float = DEFAULT_TIMEOUT) -> PodInfo:
        """One pod with its cgroup parent; raises NotFound."""

    async def containers(self, timeout: float = DEFAULT_TIMEOUT) -> list[ContainerInfo]: ...

    async def container_detail(self, container_id: str, timeout: float = DEFAULT_TIMEOUT) -> ContainerDetail:
        """Raises NotFound."""

    async def update(self, container_id: str, resources: pb.LinuxContainerResources,
                     timeout: float = DEFAULT_TIMEOUT) -> None:
        """Sets the container's resources (UpdateContainerResources); raises NotFound."""
