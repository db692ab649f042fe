"""The engine's state saves: coalesced, and written off the event loop.

At most one state write per SAVE_DELAY seconds, written and fsynced in a thread,
so the runtime's calls never wait on the disk. A crash in between loses nothing
that matters: start-up adoption takes in containers the saved state does not know.
What a call changed is encoded at the end of that call (`mark`), not at the save.
"""

from __future__ import annotations

import asyncio
import logging

from cri_resmgr import supervise
from cri_resmgr.engine.cache import Cache
from cri_resmgr.policy.api import Policy

log = logging.getLogger(__name__)

SAVE_DELAY = 0.1


class Saves:
    """The state saves of one resource manager: its cache and its policy's assignments."""

    def __init__(self, cache: Cache, policy_name: str, policy: Policy):
        self._cache = cache
        self._policy_name = policy_name
        self._policy = policy
        self._dirty = False
        self._task: asyncio.Task[None] | None = None

    def mark(self, *placed: str) -> None:
        """Marks the state dirty and makes sure a deferred save will run (the allocation
        lock held). What changed is encoded now (`Cache.settle`: some 20-40 us for a
        create), not at the save: under churn a save would otherwise encode some hundred
        records at once, a stall of milliseconds for whichever call arrives then.
        `placed`: containers just placed, whose new assignments are encoded now too."""
        self._cache.settle(placed, self._policy.assignment)
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = supervise.watched(
                asyncio.get_running_loop().create_task(self._later(), name="state-save"), "state save")

    async def _later(self) -> None:
        while True:
            # Also between writes: changes made during a write wait for the next
            # round, or under churn saves would follow each other without a pause.
            await asyncio.sleep(SAVE_DELAY)
            if not self._dirty:
                return
            self._dirty = False
            data = self._cache.snapshot(self._policy_name, self._policy.assignments())
            try:
                await asyncio.to_thread(self._cache.write, data)
            except OSError as e:
                log.error("cannot save state to %s: %s", self._cache.path, e)

    def now(self) -> None:
        """Writes the state at once (before serving, at a clean shutdown)."""
        self._dirty = False
        try:
            self._cache.save(self._policy_name, self._policy.assignments())
        except OSError as e:
            log.error("cannot save state to %s: %s", self._cache.path, e)

    def cancel(self) -> None:
        """Drops the pending save (the manager was replaced: it must not overwrite its
        successor's state)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._dirty = False
