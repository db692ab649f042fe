"""The periodic reconcile both front ends run (-reconcile-period), under `supervise.py`.

A failure to reach the runtime (the port's `RuntimeFailure`, or an OSError reading a
cgroup) is one warning until a reconcile works again, which is said too: the runtime
being away is the front end's to report (the relay's transport, the plugin's connection
loop), not once a period. Anything else ends the task, for its supervisor to log and restart.
Under NRI nothing is skipped here: before the first Configure the controller has no policy
and reconciles nothing, and until a Synchronize the view is partial, so the engine judges
nothing gone from it (`RuntimePort.listing_complete`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from cri_resmgr.engine.controller import Controller
from cri_resmgr.engine.runtime import RuntimeFailure


@dataclass(frozen=True)
class Wording:
    """A front end's lines: its logger (log filters and -logger-debug match its name) and
    what it calls a container found gone."""

    log: logging.Logger
    gone: str


async def every(controller: Controller, period: float, words: Wording) -> None:
    """Reconciles every `period` seconds, until cancelled."""
    log = words.log
    failing = False
    while True:
        await asyncio.sleep(period)
        try:
            counts = await controller.reconcile()
        except (RuntimeFailure, OSError) as e:
            if not failing:
                log.warning("reconcile with the runtime failed: %s (retrying every %gs)",
                            e.details if isinstance(e, RuntimeFailure) else e, period)
            failing = True
            continue
        if failing:
            log.info("reconcile with the runtime works again")
        failing = False
        if counts["gone"] or counts["adopted"] or counts["resent"]:
            log.info("reconcile: %d %s, %d adopted, %d sent their cpuset again (their cgroup's differed)",
                     counts["gone"], words.gone, counts["adopted"], counts["resent"])
