"""The relay's side of `/state`: the engine's snapshot, taken on its event loop.

The HTTP server answers on threads of its own; the cache and the policy belong to the
event loop, so the snapshot is taken there (a dict iterated while the loop changes it
would raise) and only the frozen result is turned into JSON on the server's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Callable
from typing import Any, Protocol

WAIT = 5.0  # seconds /state waits for the event loop


class Snapshot(Protocol):
    def to_document(self) -> dict[str, Any]: ...


class Introspectable(Protocol):
    """The engine as /state sees it (`engine.controller.Controller` is one)."""

    def state(self) -> Snapshot: ...


def on_loop(engine: Introspectable, loop: asyncio.AbstractEventLoop) -> Callable[[], tuple[str, bytes]]:
    """(HTTP status, body) for /state, asked from a server thread."""

    def state() -> tuple[str, bytes]:
        taken: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def take() -> None:
            try:
                taken.set_result(engine.state())
            except Exception as e:  # a bug in the engine: the server's 500, with its traceback
                taken.set_exception(e)

        try:
            loop.call_soon_threadsafe(take)
            snap = taken.result(WAIT)
        except TimeoutError:
            return _error(f"no answer from the relay's event loop within {WAIT:.0f}s")
        except RuntimeError as e:  # the loop is closed: shutting down
            return _error(f"shutting down: {e}")
        return "200 OK", (json.dumps(snap.to_document(), indent=1) + "\n").encode()

    return state


def _error(why: str) -> tuple[str, bytes]:
    return "503 Service Unavailable", (json.dumps({"error": why}) + "\n").encode()
