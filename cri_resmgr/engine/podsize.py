"""The container that takes its size from its pod (pod-level resources, KEP-2837).

A pod with pod-level resources may have containers without a CPU request of their
own (kubelet gives such a container the minimum shares, 2): they run within the
pod's budget. The runtime is told the pod's resources (CRI
`LinuxPodSandboxConfig.resources` at creation and `UpdatePodSandboxResources` on a
resize, NRI `pod_resources` and `UpdatePodSandbox`; for a pod without pod-level
resources kubelet sends the sum of its containers' there), and each container's own.

What the engine makes of them: the pod's remainder is its CPU request (limit) less the
own requests (limits) of its containers that have them. When one container of the pod
has no CPU request of its own, it takes the remainder as its request and limit, so the
policy places it by the pod's size (static: a Guaranteed pod of 2 CPUs gives it 2
exclusive CPUs), and a pod resize that changes the remainder resizes it. When several
have none, how the pod's budget splits among them is not known: none takes a size
(they run on shared CPUs). For a pod without pod-level resources the remainder is 0
once its containers are all known, so a container without requests stays as it was;
kubelet sends that sum on each container's resize too, before the containers' own
updates, so a pod resize changes only a container that took a size (`ResourceManager.pod_resized`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cri_resmgr.engine.classify import Requirements
from cri_resmgr.engine.resize import MIN_SHARES

__all__ = ["Member", "own_cpu", "sizes", "MIN_SHARES"]

@dataclass(frozen=True)
class Member:
    """A live container of the pod: whether it has a CPU request of its own, and its
    own request and limit (milli-CPU; what it takes from the pod when it has none)."""

    key: str
    own: bool
    cpu_request: int = 0
    cpu_limit: int | None = None


def own_cpu(cpu_shares: int) -> bool:
    """Whether kubelet gave the container a CPU request of its own (more than the
    minimum shares): one without takes its size from the pod."""
    return cpu_shares > MIN_SHARES


def recorded_shares(resources: Mapping[str, Any]) -> int:
    """The cpu_shares of a container's recorded resources (json_format's dict)."""
    try:
        return int(resources.get("cpu_shares") or 0)
    except (TypeError, ValueError):
        return 0


def sizes(pod: Requirements, members: list[Member]) -> dict[str, tuple[int, int | None]]:
    """The (cpu_request, cpu_limit) each container without a request of its own takes
    from the pod: the pod's remainder for a lone one, no size for each of several."""
    sized = [m for m in members if not m.own]
    if len(sized) != 1:
        return {m.key: (0, None) for m in sized}
    owners = [m for m in members if m.own]
    request = max(pod.cpu_request - sum(m.cpu_request for m in owners), 0)
    limit: int | None = None
    if pod.cpu_limit is not None:
        # A sibling without a limit of its own is bounded by the pod's: its request is what it takes.
        taken = sum(m.cpu_limit if m.cpu_limit is not None else m.cpu_request for m in owners)
        limit = max(pod.cpu_limit - taken, request)
    return {sized[0].key: (request, limit if request or limit else None)}
