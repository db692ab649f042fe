"""The relay's periodic reconcile and runtime probe (relay/app.py) take the runtime port's
errors: a runtime away is one warning until a reconcile works again, and the probe tells
the transport why (no gRPC error reaches them from the engine's runtime calls)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from cri_resmgr.engine.runtime import RuntimeFailure, RuntimeVersion, Unavailable
from cri_resmgr.relay import app


class _Controller:
    """Reconciles fail with each of `outcomes` that is an error, in turn; then work."""

    def __init__(self, outcomes: list[Exception | None]):
        self.outcomes = outcomes
        self.done = asyncio.Event()

    async def reconcile(self) -> dict[str, int]:
        if not self.outcomes:
            self.done.set()
            await asyncio.Event().wait()  # the test ends the loop
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return {"gone": 0, "adopted": 0, "resent": 0}


def test_a_failing_reconcile_is_one_warning_until_it_works_again(caplog: Any) -> None:
    async def go() -> None:
        controller = _Controller([Unavailable("connection refused"), RuntimeFailure("deadline", "DEADLINE_EXCEEDED"),
                                  None, Unavailable("gone again")])
        task = asyncio.ensure_future(app._reconcile_every(controller, 0))  # type: ignore[arg-type]
        done = asyncio.ensure_future(controller.done.wait())
        await asyncio.wait([done, task], return_when=asyncio.FIRST_COMPLETED)  # the loop ending is a failure
        assert not task.done(), task.exception()
        task.cancel()
    with caplog.at_level(logging.INFO):
        asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["reconcile with the runtime failed: connection refused (retrying every 0s)",
                     "reconcile with the runtime works again",
                     "reconcile with the runtime failed: gone again (retrying every 0s)"]


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
