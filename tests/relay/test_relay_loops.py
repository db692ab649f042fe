"""The periodic reconcile both front ends run (frontend/reconcile.py, in the relay's and the
NRI plugin's words) and the relay's runtime probe (relay/app.py) take the runtime port's
errors: a runtime away is one warning until a reconcile works again, and the probe tells
the transport why (no gRPC error reaches them from the engine's runtime calls)."""

from __future__ import annotations

import asyncio
import logging
from types import ModuleType
from typing import Any

import pytest

from cri_resmgr.engine.runtime import RuntimeFailure, RuntimeVersion, Unavailable
from cri_resmgr.frontend import reconcile
from cri_resmgr.nri import app as nri_app
from cri_resmgr.relay import app

FRONT_ENDS = pytest.mark.parametrize("front_end", [app, nri_app], ids=["relay", "nri"])


class _Controller:
    """Reconciles fail with each of `outcomes` that is an error, in turn; then work."""

    def __init__(self, outcomes: list[Exception | dict[str, int] | None]):
        self.outcomes = outcomes
        self.done = asyncio.Event()

    async def reconcile(self) -> dict[str, int]:
        if not self.outcomes:
            self.done.set()
            await asyncio.Event().wait()  # the test ends the loop
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome or {"gone": 0, "adopted": 0, "resent": 0}


def _run_loop(front_end: ModuleType, controller: _Controller) -> None:
    """The front end's reconcile, as its services start it, until `controller` has no more outcomes."""
    async def go() -> None:
        task = asyncio.ensure_future(reconcile.every(controller, 0, front_end.RECONCILE))  # type: ignore[arg-type]
        done = asyncio.ensure_future(controller.done.wait())
        await asyncio.wait([done, task], return_when=asyncio.FIRST_COMPLETED)  # the loop ending is a failure
        assert not task.done(), task.exception()
        task.cancel()
    asyncio.run(go())


@FRONT_ENDS
def test_a_failing_reconcile_is_one_warning_until_it_works_again(front_end: ModuleType, caplog: Any) -> None:
    controller = _Controller([Unavailable("connection refused"), RuntimeFailure("deadline", "DEADLINE_EXCEEDED"),
                              OSError("cgroup gone"), None, Unavailable("gone again"), None,
                              {"gone": 1, "adopted": 2, "resent": 0}])
    with caplog.at_level(logging.INFO):
        _run_loop(front_end, controller)
    # In the front end's own logger: log filters and -logger-debug match it as before.
    assert {r.name for r in caplog.records} == {front_end.log.name}
    lines = [r.getMessage() for r in caplog.records]
    gone = "containers gone behind the relay's back" if front_end is app else "containers gone"
    assert lines == ["reconcile with the runtime failed: connection refused (retrying every 0s)",
                     "reconcile with the runtime works again",
                     "reconcile with the runtime failed: gone again (retrying every 0s)",
                     "reconcile with the runtime works again",
                     f"reconcile: 1 {gone}, 2 adopted, 0 sent their cpuset again (their cgroup's differed)"]


@FRONT_ENDS
def test_an_error_nobody_expected_ends_the_reconcile_for_its_supervisor(front_end: ModuleType) -> None:
    """A bug is not a runtime away: it ends the task, which supervise.py logs with its
    traceback and restarts (the plugin's loop used to log it as a warning every period)."""
    async def go() -> None:
        controller = _Controller([TypeError("a bug")])
        with pytest.raises(TypeError, match="a bug"):
            await asyncio.wait_for(reconcile.every(controller, 0, front_end.RECONCILE), 10)  # type: ignore[arg-type]
    asyncio.run(go())


class _Port:
    path = "test"
    listing_complete = True

    def __init__(self, outcomes: list[Exception | None]):
        self.outcomes = outcomes

    async def version(self, timeout: float = 10.0) -> RuntimeVersion:
        if not self.outcomes:
            await asyncio.Event().wait()  # the test ends the loop
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return RuntimeVersion("fake", "1", "v1")


class _Relay:
    def __init__(self, wanted: int):
        self.probed: list[tuple[bool, str]] = []
        self.wanted = wanted
        self.done = asyncio.Event()

    def runtime_probed(self, up: bool, why: str = "") -> None:
        self.probed.append((up, why))
        if len(self.probed) == self.wanted:
            self.done.set()


def test_the_probe_tells_the_transport_why_the_runtime_is_down() -> None:
    async def go() -> list[tuple[bool, str]]:
        port = _Port([Unavailable("connection refused"), OSError("socket closed"), None])
        relay = _Relay(3)
        task = asyncio.ensure_future(app._probe_runtime_every(port, relay, 0))  # type: ignore[arg-type]
        done = asyncio.ensure_future(relay.done.wait())
        await asyncio.wait([done, task], return_when=asyncio.FIRST_COMPLETED)  # the loop ending is a failure
        assert not task.done(), task.exception()
        task.cancel()
        return relay.probed
    assert asyncio.run(go()) == [(False, "UNAVAILABLE: connection refused"), (False, "socket closed"), (True, "")]
