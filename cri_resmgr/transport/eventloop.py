"""The relay process's event loop: uvloop when it is installed, else asyncio's own.

The relay passes every kubelet call through this loop, and on a small node the
loop's own work per wake-up is a good part of what a call costs: measured
against one containerd, interleaved (docs/benchmarks.md), uvloop took the
relay's CPU per call at one caller from 119-185 us to 95-111 us. It is an
optional dependency (the `uvloop` extra); without it, or with
CRI_RESMGR_EVENT_LOOP=asyncio in the environment, asyncio's loop runs, which
behaves the same, only slower.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
ENV = "CRI_RESMGR_EVENT_LOOP"

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(choice: str | None = None) -> tuple[str, LoopFactory | None]:
    """(name, factory) of the loop to run; factory None: asyncio's default.
    `choice`: "uvloop", "asyncio", or None/"" for uvloop if installed."""
    choice = os.environ.get(ENV, "") if choice is None else choice
    if choice not in ("", "uvloop", "asyncio"):
        raise ValueError(f"{ENV}={choice!r}: expected uvloop or asyncio")
    if choice == "asyncio":
        return "asyncio", None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise ValueError(f"{ENV}=uvloop, but uvloop is not installed (pip install 'cri-resmgr[uvloop]')") \
                from None
        return "asyncio", None
    factory: LoopFactory = uvloop.new_event_loop
    return "uvloop", factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    name, factory = loop_factory()
    log.debug("event loop: %s", name)  # the first info line is the version's (tests/node)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
