"""Retry delays that double up to a ceiling, waited out interruptibly."""

from __future__ import annotations

import threading


class Backoff:
    def __init__(self, minimum: float, maximum: float) -> None:
        self._min = minimum
        self._max = maximum
        self._next = minimum

    def reset(self) -> None:
        self._next = self._min

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._max)
        return delay

    def wait(self, stop: threading.Event) -> bool:
        """Sleeps the next delay; returns True when `stop` was set meanwhile."""
        return stop.wait(self.next_delay())
