"""An asyncio loop on a background thread, so sync tests can host async servers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
