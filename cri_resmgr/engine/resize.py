"""What kubelet's UpdateContainerResources says about a container's size.

With its CPU manager at `none`, kubelet forwards an in-place resize of a running
container as UpdateContainerResources carrying the new cpu_shares, cpu_quota and
cpu_period and memory_limit_in_bytes, derived as at creation. The webhook's
annotation is stale after a resize: the update itself is the truth. The sizes are
compared in kubelet's own units (shares, quota), so a request that only changes
form on the way (333m is 340 shares, which reads back as 332m) is no change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine import classify
from cri_resmgr.policy.api import QoS, Workload

__all__ = ["Resize", "read", "milli_cpu_to_shares", "milli_cpu_to_quota"]

# kubelet's constants (pkg/kubelet/cm/helpers_linux.go).
MIN_SHARES, MAX_SHARES, SHARES_PER_CPU = 2, 262144, 1024
MIN_QUOTA_PERIOD = 1000


def milli_cpu_to_shares(milli: int) -> int:
    if milli == 0:
        return MIN_SHARES
    return min(max(milli * SHARES_PER_CPU // 1000, MIN_SHARES), MAX_SHARES)


def milli_cpu_to_quota(milli: int, period: int) -> int:
    if milli == 0:
        return 0
    return max(milli * period // 1000, MIN_QUOTA_PERIOD)


@dataclass(frozen=True)
class Resize:
    workload: Workload  # the container with its new sizes
    decide: bool  # whether the policy must re-decide (False: only the memory limit changed)

    def describe(self) -> str:
        w = self.workload
        limit = "unlimited" if w.cpu_limit is None else f"{w.cpu_limit}m"
        return f"cpu request {w.cpu_request}m, limit {limit}"


def read(w: Workload, linux: pb.LinuxContainerResources) -> Resize | None:
    """The container's sizes after the update; None when it changes none of them.
    An update without cpu_shares (not kubelet's: kubelet always sets them) says
    nothing about CPUs, one without a memory limit nothing about memory."""
    cpu_request, cpu_limit = w.cpu_request, w.cpu_limit
    if linux.cpu_shares:
        if linux.cpu_shares != milli_cpu_to_shares(w.cpu_request):
            cpu_request = classify.requirements_from_cri(linux.cpu_shares, 0, 0, 0).cpu_request
        period = linux.cpu_period
        if linux.cpu_quota <= 0 or period <= 0:
            # No quota: no limit, except that a Guaranteed container always has one
            # (an update that leaves the quota out does not change it).
            cpu_limit = w.cpu_limit if w.qos is QoS.GUARANTEED else None
        elif w.cpu_limit is None or linux.cpu_quota != milli_cpu_to_quota(w.cpu_limit, period):
            cpu_limit = round(linux.cpu_quota * 1000 / period)
    # 0: no memory limit given (kubelet cannot remove a limit by a resize; NRI's
    # UpdateContainer leaves out what it does not change).
    memory_limit = linux.memory_limit_in_bytes or w.memory_limit
    memory_request = w.memory_request
    if memory_limit != w.memory_limit and memory_limit is not None:
        if w.qos is QoS.GUARANTEED or memory_request > memory_limit:
            memory_request = memory_limit  # Guaranteed: requests equal limits, kubelet keeps the class
    new = (cpu_request, cpu_limit, memory_request, memory_limit)
    if new == (w.cpu_request, w.cpu_limit, w.memory_request, w.memory_limit):
        return None
    decide = new[:3] != (w.cpu_request, w.cpu_limit, w.memory_request)
    return Resize(dataclasses.replace(w, cpu_request=cpu_request, cpu_limit=cpu_limit,
                                      memory_request=memory_request, memory_limit=memory_limit), decide)
