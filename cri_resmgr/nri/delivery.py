"""When the plugin's container updates reach the runtime outside a hook's own reply.

A hook's decision goes in that hook's reply where NRI lets the reply carry updates
(CreateContainer, UpdateContainer, StopContainer, Synchronize: `NriRuntime.collect`).
The rest is sent with the Runtime service's UpdateContainers, and never while a call of
the runtime to the plugin is in flight: containerd before NRI v0.12.1 (every release
through 2.3.4) takes its two NRI locks in one order for a lifecycle event and in the
other for a plugin's UpdateContainers, and the two can deadlock (containerd#13733);
later ones hold the update until the event in flight has ended. So:

* `queue`: updates that cannot wait for a hook (the reconcile, a configuration change, a
  decision that missed its hook's deadline, an update owed to a container since its
  start): sent once no call of the runtime's is in flight and none has come for SETTLE
  (URGENT_SETTLE for an `urgent` one: a container may be on another's CPUs meanwhile),
  or, when the runtime never settles that long, MAX_WAIT (URGENT_MAX_WAIT) after it
  was queued with only nothing in flight; until then a hook that carries updates takes
  them into its reply instead (`take`), unless they must go alone. The deadlock needs
  an event to begin while an UpdateContainers is on its way (the runtime takes its own
  lock, builds the event's request, then the adaptation's lock, which the update holds
  while it waits for the first): the less often one goes while the runtime is busy, the
  rarer it is; on a busy node nearly all ride in replies.
* `carry`: updates that can wait (what a removal or a pod's stop frees, whose replies
  carry nothing): the next reply that carries updates takes them, or, when none comes
  within CARRY_WAIT, UpdateContainers.

Nothing here waits for the runtime's answer on a hook's behalf: a hook that waited for
an UpdateContainers the runtime holds until that hook ends would stall until its own
deadline.

`after_reply`: work that need not delay the reply being answered (log text for a
thousand adopted containers) runs once no call of the runtime's is in flight, right
after the reply is written, in the same step of the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from cri_resmgr._proto import nri_api_pb2 as api

log = logging.getLogger(__name__)

# Sends updates with UpdateContainers; returns the ones the runtime failed.
SendUpdates = Callable[[list[api.ContainerUpdate]], Awaitable[list[api.ContainerUpdate]]]

# How long carried updates wait for a reply that can take them.
CARRY_WAIT = 1.0
# How long the runtime must have made no call before an UpdateContainers goes, and the
# longest an update waits for that (then only for nothing in flight); an urgent one's.
SETTLE = 1.0
MAX_WAIT = 30.0
URGENT_SETTLE = 0.3
URGENT_MAX_WAIT = 2.0


class _Queued:
    __slots__ = ("update", "alone", "urgent", "since")

    def __init__(self, update: api.ContainerUpdate, alone: bool, urgent: bool, since: float) -> None:
        self.update, self.alone, self.urgent, self.since = update, alone, urgent, since


class Delivery:
    """The outbox of UpdateContainers and the calls of the runtime in flight."""

    def __init__(self) -> None:
        self._send: SendUpdates | None = None
        self._in_flight = 0  # the runtime's calls to the plugin not answered yet
        self._session = 0  # counts connections: a closed one's calls end uncounted
        self._sync_open = False  # a Synchronize in parts: the runtime holds its lock between them
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._last_call = 0.0  # monotonic time a call of the runtime's last began or was answered
        # container id -> what to send it (`alone` ones never go in a hook's reply)
        self._outbox: dict[str, _Queued] = {}
        self._carry: dict[str, api.ContainerUpdate] = {}
        self._carry_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._delivering = False  # an UpdateContainers call is on the wire
        self._drained = asyncio.Event()
        self._drained.set()
        self._after: list[Callable[[], None]] = []  # `after_reply`
        self.sent = 0  # updates sent with UpdateContainers
        self.calls = 0  # UpdateContainers calls made
        self.failed = 0  # updates the runtime failed or a call that failed carried

    # -- the connection and the runtime's calls ---------------------------------------------

    def connected(self, send: SendUpdates) -> None:
        self._send = send

    def disconnected(self) -> None:
        """Queued updates are dropped: the next session's Synchronize reconciles."""
        self._send = None
        self._sync_open = False
        dropped = len(self._outbox) + len(self._carry)
        self._outbox.clear()
        self._carry.clear()
        self._cancel_timer()
        self._settle()
        self._check_drained()
        self._run_after()  # no reply is coming for the calls in flight
        if dropped:
            log.warning("%d container updates dropped: the NRI connection closed (the next Synchronize "
                        "reconciles)", dropped)

    @property
    def up(self) -> bool:
        return self._send is not None

    def watcher(self) -> Callable[[bool], None]:
        """For a new connection's ttrpc.Server: told when each call of the runtime's goes
        to its handler (True) and once its reply is written (False), so an UpdateContainers
        sent afterwards follows the reply on the socket."""
        self._session += 1
        session, self._in_flight = self._session, 0
        self._settle()
        self._run_after()  # the closed connection's calls are not answered any more

        def in_flight(began: bool) -> None:
            if session == self._session:
                self.call_began() if began else self.call_answered()
        return in_flight

    def call_began(self) -> None:
        self._in_flight += 1
        self._last_call = time.monotonic()
        self._settle()

    def call_answered(self) -> None:
        self._in_flight = max(self._in_flight - 1, 0)
        self._last_call = time.monotonic()
        self._settle()
        if self._in_flight == 0:
            self._run_after()

    def after_reply(self, work: Callable[[], None]) -> None:
        """`work` once no call of the runtime's is in flight: at once when none is, else
        right after the last reply in flight has been written."""
        if self._in_flight == 0:
            work()
        else:
            self._after.append(work)

    def _run_after(self) -> None:
        work, self._after = self._after, []
        for fn in work:
            try:
                fn()
            except Exception:  # a bug there must not fail the reply's bookkeeping
                log.exception("work after a reply failed")

    def synchronizing(self, open_: bool) -> None:
        """Between the parts of a Synchronize the runtime keeps its lock: no updates then."""
        self._sync_open = open_
        self._settle()

    @property
    def quiet(self) -> bool:
        return self._in_flight == 0 and not self._sync_open

    def _settle(self) -> None:
        if self.quiet:
            self._quiet.set()
        else:
            self._quiet.clear()

    # -- what goes out -------------------------------------------------------------------------

    def queue(self, updates: Iterable[api.ContainerUpdate], alone: bool = False, urgent: bool = False) -> None:
        """For UpdateContainers once the runtime has no call of ours in flight and has
        settled (the newest update of a container wins; it keeps the oldest one's wait)."""
        now = time.monotonic()
        for u in updates:
            had = self._outbox.get(u.container_id)
            self._outbox[u.container_id] = _Queued(u, alone, urgent or (had is not None and had.urgent),
                                                   had.since if had is not None else now)
        self._check_drained()
        if not self._outbox:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="NRI UpdateContainers")

    def carry(self, updates: Iterable[api.ContainerUpdate]) -> None:
        """For the next reply that carries updates, or UpdateContainers after CARRY_WAIT."""
        for u in updates:
            self._carry[u.container_id] = u
        self._check_drained()
        if self._carry and self._carry_timer is None:
            self._carry_timer = asyncio.get_running_loop().call_later(CARRY_WAIT, self._carry_due)

    def take(self) -> dict[str, api.ContainerUpdate]:
        """What a hook whose reply carries updates takes with it: the carried updates and
        the queued ones not sent yet (not those that must go alone)."""
        taken = dict(self._carry)
        self._carry.clear()
        self._cancel_timer()
        for cid, q in list(self._outbox.items()):
            if not q.alone:
                taken[cid] = q.update
                del self._outbox[cid]
        self._check_drained()
        return taken

    def forget(self, container_ids: Iterable[str]) -> None:
        """The containers are gone: nothing more to send them."""
        for cid in container_ids:
            self._outbox.pop(cid, None)
            self._carry.pop(cid, None)
        self._check_drained()

    async def drained(self) -> None:
        """Until everything queued or carried so far has been sent (or dropped)."""
        await self._drained.wait()

    def _carry_due(self) -> None:
        self._carry_timer = None
        carried, self._carry = list(self._carry.values()), {}
        self.queue(carried)

    def _check_drained(self) -> None:
        if self._outbox or self._carry or self._delivering:
            self._drained.clear()
        else:
            self._drained.set()

    def _cancel_timer(self) -> None:
        if self._carry_timer is not None:
            self._carry_timer.cancel()
            self._carry_timer = None

    def _settling(self) -> float:
        """Seconds still to wait for the runtime to settle (0: send now)."""
        now = time.monotonic()
        urgent = [q.since for q in self._outbox.values() if q.urgent]
        settle, longest = (URGENT_SETTLE, URGENT_MAX_WAIT) if urgent else (SETTLE, MAX_WAIT)
        waited = now - min(urgent or [q.since for q in self._outbox.values()])
        return max(min(settle - (now - self._last_call), longest - waited), 0.0)

    async def _run(self) -> None:
        while self._outbox:
            while not self.quiet:
                await self._quiet.wait()
            if not self._outbox:  # a hook took them into its reply meanwhile
                break
            wait = self._settling()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            batch = [q.update for q in self._outbox.values()]
            self._outbox.clear()
            self._delivering = True
            try:
                # The quiet check above and the call's write happen in one step of the
                # loop: no call of the runtime's can have come in between (`call_answered`).
                await self._deliver(batch)
            finally:
                self._delivering = False
                self._check_drained()

    async def _deliver(self, updates: list[api.ContainerUpdate]) -> None:
        if self._send is None:
            log.error("%d container updates lost: not connected to the runtime", len(updates))
            self.failed += len(updates)
            return
        self.calls += 1
        t0 = time.monotonic()
        try:
            failed = await self._send(updates)
        except Exception as e:  # logged: a later reconcile or decision sends them again
            self.failed += len(updates)
            log.error("UpdateContainers of %d containers failed after %.2fs: %s", len(updates),
                      time.monotonic() - t0, e)
            return
        self.sent += len(updates) - len(failed)
        self.failed += len(failed)
        for u in failed:
            log.error("the runtime failed to update container %s", u.container_id)
