"""A policy seen through a window: every decision the engine asks of it, timed.

The simulator builds the policy through the registry as the relay does and wraps
it in `RecordingPolicy` before handing it to the engine's ResourceManager, so the
engine is unchanged and each of its decisions is seen with its inputs and outputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cri_resmgr.policy.api import Assignment, Decision, Policy, Resizable, ResizeError, Resources, Workload
from cri_resmgr.policy.usage import PolicyUsage

__all__ = ["Event", "RecordingPolicy"]


@dataclass(frozen=True)
class Event:
    action: str  # "allocate", "resize" or "release"
    key: str
    container: str  # namespace/pod:name
    decision: Decision
    ns: int  # the policy's own time for it, wall clock
    assignment: Assignment | None  # after the decision (allocate)
    cpu_ns: int = 0  # the deciding thread's CPU time (which preemption on a busy machine does not inflate)
    workload: Workload | None = None  # the container as the policy saw it (its last, for a release)


class RecordingPolicy:
    """Delegates to `inner`; `take()` hands over the decisions made since the last call."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.names: dict[str, str] = {}  # key -> namespace/pod:name
        self.workloads: dict[str, Workload] = {}  # key -> the container as last decided on
        self._events: list[Event] = []

    def take(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def allocate(self, workload: Workload) -> Decision:
        return self._decided("allocate", workload, self.inner.allocate)

    def release(self, key: str) -> Decision:
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        d = self.inner.release(key)
        ns, cpu = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
        self._events.append(Event("release", key, self.names.get(key, key), d, ns, None, cpu,
                                  self.workloads.pop(key, None)))
        return d

    def resize(self, workload: Workload) -> Decision:
        """policy.api.Resizable, when the policy is (every built-in one is)."""
        inner = self.inner
        if not isinstance(inner, Resizable):
            raise ResizeError(f"policy {type(inner).__name__} cannot resize containers")
        return self._decided("resize", workload, inner.resize)

    def _decided(self, action: str, workload: Workload, decide: Callable[[Workload], Decision]) -> Decision:
        """A decision on `workload`, timed and recorded once the policy made it (a refusal
        leaves the container as it was)."""
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        d = decide(workload)
        ns, cpu = time.perf_counter_ns() - t0, time.thread_time_ns() - c0
        self.names[workload.key] = str(workload)
        self.workloads[workload.key] = workload
        self._events.append(Event(action, workload.key, str(workload), d, ns, self.inner.assignment(workload.key),
                                  cpu, workload))
        return d

    def restore(self, items: list[tuple[Workload, Assignment | None]], live: bool = False) -> Decision:
        return self.inner.restore(items, live=live)

    def resources(self, key: str) -> Resources | None:
        return self.inner.resources(key)

    def exclusive_wanted(self, workload: Workload) -> int:
        """The inner policy's, for the /state snapshot's requests not met (0 when it has none)."""
        wanted = getattr(self.inner, "exclusive_wanted", None)
        return int(wanted(workload)) if wanted is not None else 0

    def assignments(self) -> Mapping[str, Assignment]:
        return self.inner.assignments()

    def assignment(self, key: str) -> Assignment | None:
        return self.inner.assignment(key)

    def usage(self) -> PolicyUsage:
        return self.inner.usage()
