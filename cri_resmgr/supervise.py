"""Background tasks that never die silently.

A front end's periodic work (the reconcile, publishing the node's CPUs) runs as a
task nobody awaits until shutdown: an exception it does not expect would end it
without a word, and with it, say, the freeing of CPUs of containers removed behind
the relay's back. `supervised` runs such a task, and when it ends with an error
logs one line naming the task and the error (the traceback at debug level) and
starts it again after a pause that grows while it keeps failing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from cri_resmgr.bounded import clip

log = logging.getLogger(__name__)

FIRST_PAUSE = 1.0  # seconds before the first restart
LONGEST_PAUSE = 60.0
STEADY = 300.0  # a run this long was no crash loop: the pause starts over


async def supervised(name: str, run: Callable[[], Coroutine[Any, Any, None]],
                     first_pause: float = FIRST_PAUSE, longest_pause: float = LONGEST_PAUSE) -> None:
    """Runs `run()` until cancelled; restarts it when it raises or returns."""
    pause = first_pause
    restarts = 0
    while True:
        started = time.monotonic()
        try:
            await run()
            why = "ended"
        except asyncio.CancelledError:
            raise
        except Exception as e:  # whatever it was, the task must go on
            why = f"failed: {type(e).__name__}: {clip(str(e), 200)}"
            log.debug("traceback of the %s task's failure", name, exc_info=e)
        if time.monotonic() - started > STEADY:
            pause = first_pause
        restarts += 1
        log.error("background task %s %s; restarting it in %gs (restart %d)", name, why, pause, restarts)
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest_pause)


def watched(task: asyncio.Task[Any], name: str) -> asyncio.Task[Any]:
    """`task`, whose failure (an exception nobody awaits it for) is logged when it ends:
    one line naming `name` and the error, the traceback at debug level. For one-off and
    restartable tasks that are not supervised (a SIGHUP's reload, the engine's state
    saves, update sender and policy timer: each is started again by what needs it next)."""
    task.add_done_callback(lambda t: _report(t, name))
    return task


def _report(task: asyncio.Task[Any], name: str) -> None:
    if task.cancelled():
        return
    e = task.exception()
    if e is not None:
        log.error("background task %s failed: %s: %s", name, type(e).__name__, clip(str(e), 200))
        log.debug("traceback of the %s task's failure", name, exc_info=e)


def start(name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
    """`supervised(name, run)` as a task (cancel it to stop)."""
    return asyncio.get_running_loop().create_task(supervised(name, run), name=name)
