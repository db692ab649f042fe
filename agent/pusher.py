"""Delivers the selected configuration to the relay, once per change.

The pusher remembers the last configuration the relay answered for, accepted
or rejected, and pushes again only when the selection's data differ from it: a
re-established watch or a re-list that finds the same maps pushes nothing. While
the relay is unreachable it retries with backoff, always with the newest
selection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cri_resmgr_agent.backoff import Backoff
from cri_resmgr_agent.relay_client import RelayConfigClient, RelayUnavailable
from cri_resmgr_agent.selection import Selection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PushOutcome:
    selection: Selection
    source: str
    # None: accepted.
    error: str | None


class ConfigPusher:
    def __init__(self, client: RelayConfigClient, node_name: str, namespace: str, backoff: Backoff,
                 stop: threading.Event, on_outcome: Callable[[PushOutcome], None],
                 on_undelivered: Callable[[Selection, str], None]) -> None:
        self._client = client
        self._node_name = node_name
        self._namespace = namespace
        self._backoff = backoff
        self._stop = stop
        self._on_outcome = on_outcome
        self._on_undelivered = on_undelivered
        self._cond = threading.Condition()
        self._wanted: Selection | None = None
        self._answered: Mapping[str, str] | None = None
        self.pushes = 0  # configurations the relay answered for

    def offer(self, selection: Selection) -> None:
        with self._cond:
            self._wanted = selection
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        failing = False
        while not self._stop.is_set():
            with self._cond:
                while not self._stop.is_set() and (self._wanted is None or self._wanted.data == self._answered):
                    self._cond.wait()
                if self._stop.is_set():
                    return
                selection = self._wanted
            assert selection is not None
            source = self._source(selection)
            try:
                error = self._client.set_config(self._node_name, selection.data, source,
                                                selection.resource_version)
            except RelayUnavailable as exc:
                if not failing:
                    log.warning("cannot deliver configuration from %s: %s; retrying", source, exc)
                    failing = True
                self._on_undelivered(selection, str(exc))
                self._wait_retry()
                continue
            except Exception as exc:  # an unexpected gRPC error: retry like an outage, but say what it was
                log.error("delivering configuration from %s failed: %s", source, exc)
                self._on_undelivered(selection, str(exc))
                self._wait_retry()
                continue
            failing = False
            self._backoff.reset()
            with self._cond:
                self._answered = selection.data
                self.pushes += 1
            if error:
                log.error("relay rejected configuration from %s: %s", source, error)
            else:
                log.info("relay accepted configuration from %s", source)
            self._on_outcome(PushOutcome(selection, source, error))

    def _source(self, selection: Selection) -> str:
        if selection.configmap is None:
            return f"no configmap for node {self._node_name} in namespace {self._namespace}"
        return f"configmap {self._namespace}/{selection.configmap}"

    def _wait_retry(self) -> None:
        delay = self._backoff.next_delay()
        with self._cond:
            # A new selection does not cut the wait short: the relay is what we wait for.
            self._cond.wait_for(self._stop.is_set, timeout=delay)
