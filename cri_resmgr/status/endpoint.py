"""The relay's side of `/state`: the engine's snapshot, taken on its event loop.

The HTTP server answers on threads of its own; the cache and the policy belong to the
event loop, so the snapshot is taken there (a dict iterated while the loop changes it
would raise) and only the frozen result is turned into JSON on the server's thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from cri_resmgr import __version__

WAIT = 5.0  # seconds /state waits for the event loop


class Snapshot(Protocol):
    def to_document(self) -> dict[str, Any]: ...


class Introspectable(Protocol):
    """The engine as /state sees it (`engine.controller.Controller` is one): its snapshot,
    which may ask the runtime (the none policy's containers)."""

    def current_state(self) -> Coroutine[Any, Any, Snapshot]: ...


def on_loop(engine: Introspectable, loop: asyncio.AbstractEventLoop) -> Callable[[], tuple[str, bytes]]:
    """(HTTP status, body) for /state, asked from a server thread."""

    def state() -> tuple[str, bytes]:
        asked = engine.current_state()
        try:
            future = asyncio.run_coroutine_threadsafe(asked, loop)
        except RuntimeError as e:  # the loop is closed: shutting down
            asked.close()  # never scheduled: closed here, not warned of as never awaited
            return _error(f"shutting down: {e}")
        try:
            snap = future.result(WAIT)
        except TimeoutError:
            return _error(f"no answer from the relay's event loop within {WAIT:.0f}s")
        doc = snap.to_document()
        # What a picture in a bug report must say: which node, when, which build.
        doc["node"] = os.environ.get("NODE_NAME") or socket.gethostname()
        doc["taken_at"] = time.time()
        doc["relay_version"] = __version__
        return "200 OK", (json.dumps(doc, indent=1) + "\n").encode()

    return state


def _error(why: str) -> tuple[str, bytes]:
    return "503 Service Unavailable", (json.dumps({"error": why}) + "\n").encode()
