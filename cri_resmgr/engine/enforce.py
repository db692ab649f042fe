"""Sends the UpdateContainerResources calls the relay makes on its own.

Updates are queued per container id and the newest wins, so a burst of
decisions costs one call per container. Failures are retried with backoff and
then logged; they never fail the kubelet call that caused them.

An update that races the container's start is sent again once the start has
returned: containerd (and CRI-O) apply an update to a container that is not yet
running to its spec only, and a container whose StartContainer is in flight may
already have its task made from the old spec, so the update would never reach its
cgroup. The front end brackets each start with `starting` and `started`; an
update on the wire at any moment in between is sent again after it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cri_resmgr import supervise
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.bounded import clip
from cri_resmgr.engine.runtime import NotFound, RuntimeFailure, RuntimePort

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpdateStats:
    """A snapshot of the enforcer's counters (see `Enforcer.stats`)."""

    sent: int = 0
    failed: int = 0  # given up after retries
    resent_after_start: int = 0  # raced a StartContainer, sent again once it returned


class Enforcer:
    def __init__(self, runtime: RuntimePort, attempts: int = 4, backoff: float = 0.5,
                 timeout: float = 10.0):
        self._runtime = runtime
        self._attempts = attempts
        self._backoff = backoff
        self._timeout = timeout
        # id -> (resources, the container's name for log lines: namespace/pod:container,
        # or what gives it, formatted only when a line is written)
        self._pending: dict[str, tuple[pb.LinuxContainerResources, object]] = {}
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._sent = 0
        self._failed = 0
        self._resent = 0
        # The update on the wire now: (id, resources, name).
        self._sending: tuple[str, pb.LinuxContainerResources, object] | None = None
        # Containers whose StartContainer is in flight -> the last update sent to
        # each meanwhile (None: none yet), to send again once the start returns.
        self._starting: dict[str, tuple[pb.LinuxContainerResources, object] | None] = {}

    def stats(self) -> UpdateStats:
        """The counters as they are now; safe from another thread (metrics)."""
        return UpdateStats(sent=self._sent, failed=self._failed, resent_after_start=self._resent)

    def starting(self, container_id: str) -> None:
        """The container's StartContainer is about to go to the runtime."""
        sending = self._sending
        raced = sending[1:] if sending is not None and sending[0] == container_id else None
        self._starting[container_id] = raced

    def started(self, container_id: str) -> bool:
        """The container's StartContainer returned (or failed): an update sent while it
        was in flight is sent again, unless a newer one is queued (it goes out after
        the start anyway). True if one was."""
        raced = self._starting.pop(container_id, None)
        if raced is None:
            return False
        if container_id not in self._pending:
            self._resent += 1
            log.info("%s: update raced its start; sent again after its start (cpuset %s)",
                     _Who(raced[1], container_id), raced[0].cpuset_cpus)
            self.submit(container_id, *raced)
        return True

    def busy(self, container_id: str) -> bool:
        """An update to the container is queued or on the wire, or its start is in
        flight: what its cgroup holds now says nothing about what it will hold."""
        sending = self._sending
        return (container_id in self._pending or container_id in self._starting
                or (sending is not None and sending[0] == container_id))

    def submit(self, container_id: str, resources: pb.LinuxContainerResources, name: object = "") -> None:
        self._pending[container_id] = (resources, name)
        self._idle.clear()
        self._wakeup.set()
        if self._task is None or self._task.done():  # a task that died is started again
            self._task = supervise.watched(asyncio.get_running_loop().create_task(self._run(), name="enforcer"),
                                           "container updates")

    async def flush(self) -> None:
        """Waits until everything submitted so far has been sent or given up on."""
        await self._idle.wait()

    async def close(self, timeout: float = 5.0) -> None:
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            log.warning("dropping %d unsent container updates at shutdown", len(self._pending))
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                container_id, (resources, name) = next(iter(self._pending.items()))
                del self._pending[container_id]
                await self._send(container_id, resources, name)
            if not self._pending:
                self._idle.set()

    async def _send(self, container_id: str, resources: pb.LinuxContainerResources, name: object) -> None:
        who = _Who(name, container_id)
        delay = self._backoff
        for attempt in range(1, self._attempts + 1):
            if container_id in self._pending:
                return  # superseded while we were retrying
            if container_id in self._starting:
                self._starting[container_id] = (resources, name)
            self._sending = (container_id, resources, name)
            try:
                await self._runtime.update(container_id, resources, self._timeout)
                self._sent += 1
                # The engine's INFO line names the batch this is part of (resmgr._sync).
                log.debug("updated %s: cpuset %s mems %s", who,
                          resources.cpuset_cpus, resources.cpuset_mems or "-")
                return
            except NotFound:
                log.info("%s is gone; update dropped", who)
                return
            except RuntimeFailure as e:
                log.warning("updating %s failed (attempt %d/%d): %s: %s", who,
                            attempt, self._attempts, e.reason, e.details)
            except Exception as e:  # no runtime's answer (a closed channel, a bug below): retried, so
                # neither this update nor the sender task (and every update after it) is lost
                log.warning("updating %s failed (attempt %d/%d): %s: %s", who,
                            attempt, self._attempts, type(e).__name__, clip(str(e), 200))
            finally:
                self._sending = None
            await asyncio.sleep(delay)
            delay *= 2
        self._failed += 1
        log.error("giving up updating %s to cpuset %s", who, resources.cpuset_cpus)


class _Who:
    """`namespace/pod:container (0123456789ab)`, formatted only if a line is written."""

    __slots__ = ("name", "container_id")

    def __init__(self, name: object, container_id: str) -> None:
        self.name, self.container_id = name, container_id

    def __str__(self) -> str:
        name = str(self.name)
        return f"{name} ({self.container_id[:12]})" if name else self.container_id[:12]
