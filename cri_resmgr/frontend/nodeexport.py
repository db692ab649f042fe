"""Publishes what the relay decided on its Node, through the node agent (`-agent-socket`).

One annotation, `cri-resource-manager.intel.com/topology`, holds JSON with the free
exclusive-capable CPUs per NUMA node and the policy's pools, for the scheduler's
extenders and for people (`kubectl get node -o yaml`). The usage is looked at every
CHECK_PERIOD seconds (a snapshot of the policy's book, no runtime call) and the
annotation patched when it changed, at most once per `interval`: a burst of
creates is one patch, not one per create. Without an agent the relay says so once
at debug level (agent_client.py) and keeps looking, quietly, for one to appear.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from cri_resmgr.engine.usage import NodeUsage
from cri_resmgr.frontend.agent_client import AgentClient, AgentError, AgentUnavailableError

# The name its lines carried before it moved: log filters and -logger-debug (logsetup.SOURCES) match it.
log = logging.getLogger("cri_resmgr.nodeexport")

ANNOTATION = "cri-resource-manager.intel.com/topology"
CHECK_PERIOD = 1.0  # seconds between looks at the usage; cheap, no I/O
DEFAULT_INTERVAL = 10.0  # seconds: at most one patch of the Node this often


def document(policy: str, usage: NodeUsage | None) -> str:
    """The annotation's value: compact JSON, keys sorted, so equal usage is an equal string."""
    doc: dict[str, Any] = {"policy": policy, "numaNodes": {}, "pools": {}}
    if usage is not None:
        doc["numaNodes"] = {str(n): {"freeExclusiveCPUs": str(cpus), "freeExclusiveCount": len(cpus)}
                            for n, cpus in sorted(usage.exclusive_free.items())}
        doc["pools"] = {p.name: {"cpus": str(p.cpus), "exclusive": str(p.exclusive), "shared": str(p.shared)}
                        for p in usage.pools}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


class NodeExport:
    """Keeps the Node's annotation current; `run()` until cancelled."""

    def __init__(self, client: AgentClient, policy: Callable[[], str], usage: Callable[[], NodeUsage | None],
                 interval: float = DEFAULT_INTERVAL, check_period: float = CHECK_PERIOD) -> None:
        self._client = client
        self._policy = policy
        self._usage = usage
        self._interval = interval
        self._check = check_period
        self._published: str | None = None  # what the Node carries, as far as we know
        self._last_try = -float("inf")
        self._last_error: str | None = None

    async def run(self) -> None:
        try:
            while True:
                await self.step()
                await asyncio.sleep(self._check)
        finally:
            await self._client.close()

    async def step(self) -> bool:
        """Publishes the usage if it changed and the interval has passed; True if it did."""
        doc = document(self._policy(), self._usage())
        now = time.monotonic()
        if doc == self._published or now - self._last_try < self._interval:
            return False
        self._last_try = now
        try:
            await self._client.patch_node(set_annotations={ANNOTATION: doc})
        except AgentUnavailableError:
            return False  # logged once by the client; an agent that appears gets the next change
        except AgentError as e:
            if str(e) != self._last_error:  # once per distinct refusal, not every interval
                log.warning("cannot publish the node's CPUs through the agent: %s", e)
                self._last_error = str(e)
            return False
        if self._last_error is not None:
            log.info("publishing the node's CPUs through the agent works again")
            self._last_error = None
        self._published = doc
        log.debug("published %s on the Node: %s", ANNOTATION, doc)
        return True
