"""A policy's own timer, for decisions due at a time rather than on a call (the
topology-aware policy's cold start: memory moves from PMEM to DRAM after a while).

A policy stays free of I/O and of the event loop: it may offer two optional methods,

    next_deadline() -> float | None     the wall-clock time (time.time()) something is due
    expire(now: float) -> Decision      what changes at `now`; `others` as for any decision

and the engine arms one timer for the earliest deadline, calls `expire` under the
allocation lock when it fires and sends the `others` updates as for any decision.
Policies without the methods are not affected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cri_resmgr import supervise

log = logging.getLogger(__name__)

__all__ = ["PolicyTimer", "has_deadlines"]


def has_deadlines(policy: Any) -> bool:
    """Whether the policy offers `next_deadline` and `expire`: only then does it need a timer."""
    return callable(getattr(policy, "next_deadline", None)) and callable(getattr(policy, "expire", None))


class PolicyTimer:
    def __init__(self, policy: Any, fire: Callable[[], Awaitable[None]],
                 clock: Callable[[], float] = time.time) -> None:
        self._next_deadline: Callable[[], float | None] | None = getattr(policy, "next_deadline", None)
        self._fire = fire
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: float | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def armed_for(self) -> float | None:
        return self._armed_for

    def rearm(self) -> None:
        """Arms the timer for the policy's next deadline (call after every decision)."""
        if self._next_deadline is None:
            return
        deadline = self._next_deadline()
        if deadline == self._armed_for and (deadline is None or self._handle is not None):
            return
        self._disarm()
        if deadline is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a synchronous caller): nothing to arm
            return
        delay = max(0.0, deadline - self._clock())
        self._armed_for = deadline
        self._handle = loop.call_later(delay, self._start)

    def _start(self) -> None:
        self._handle = None
        self._armed_for = None
        self._task = supervise.watched(asyncio.get_running_loop().create_task(self._run(), name="policy-timer"),
                                       "policy timer")

    async def _run(self) -> None:
        try:
            await self._fire()
        except Exception:  # a timer must not die silently, nor take the relay down
            log.exception("policy timer failed")

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed_for = None

    def cancel(self) -> None:
        """Stops the timer for good (the manager is retired or closed), a firing under way too."""
        self._disarm()
        self._next_deadline = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
