"""Makes the relay's answers visible on the cluster.

A rejected configuration sets the node annotation CONFIG_ERROR_ANNOTATION to
the error and records a Warning Event on the Node; an accepted one removes the
annotation and records a Normal Event. Reports are retried with backoff while
the API server is down; only the newest outcome matters, so a newer one
replaces one not yet reported.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from datetime import UTC, datetime

from kubernetes import client

from cri_resmgr_agent.backoff import Backoff
from cri_resmgr_agent.kube import body
from cri_resmgr_agent.pusher import PushOutcome

log = logging.getLogger(__name__)

CONFIG_ERROR_ANNOTATION = "cri-resource-manager.intel.com/config-error"
COMPONENT = "cri-resmgr-agent"
# Kubernetes caps annotation values and event messages; keep errors well within.
_MAX_TEXT = 4000


class ClusterReporter:
    def __init__(self, core: client.CoreV1Api, node_name: str, event_namespace: str, backoff: Backoff,
                 stop: threading.Event, request_timeout: float = 30.0) -> None:
        self._core = core
        self._node_name = node_name
        self._namespace = event_namespace
        self._backoff = backoff
        self._stop = stop
        self._timeout = request_timeout
        self._cond = threading.Condition()
        self._pending: PushOutcome | None = None
        self.reported = 0

    def report(self, outcome: PushOutcome) -> None:
        with self._cond:
            self._pending = outcome
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                self._cond.wait_for(lambda: self._stop.is_set() or self._pending is not None)
                if self._stop.is_set():
                    return
                outcome = self._pending
            assert outcome is not None
            try:
                self._publish(outcome)
            except Exception as exc:
                log.warning("cannot report the configuration outcome to the cluster: %s; retrying", exc)
                delay = self._backoff.next_delay()
                with self._cond:
                    self._cond.wait_for(self._stop.is_set, timeout=delay)
                continue
            self._backoff.reset()
            with self._cond:
                if self._pending is outcome:
                    self._pending = None
                self.reported += 1

    def _publish(self, outcome: PushOutcome) -> None:
        error = outcome.error[:_MAX_TEXT] if outcome.error else None
        patch = {"metadata": {"annotations": {CONFIG_ERROR_ANNOTATION: error}}}
        response = self._core.patch_node(self._node_name, patch, _content_type="application/merge-patch+json",
                                         _preload_content=False, _request_timeout=self._timeout)
        uid = json.loads(body(response))["metadata"].get("uid")
        now = datetime.now(UTC)
        if error:
            reason, kind, message = "ConfigRejected", "Warning", f"{outcome.source} rejected by cri-resmgr: {error}"
        else:
            reason, kind, message = "ConfigApplied", "Normal", f"{outcome.source} applied by cri-resmgr"
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{self._node_name}.{time.time_ns():x}{uuid.uuid4().hex[:4]}",
                                         namespace=self._namespace),
            involved_object=client.V1ObjectReference(kind="Node", api_version="v1", name=self._node_name,
                                                     uid=uid),
            reason=reason, message=message[:_MAX_TEXT], type=kind,
            source=client.V1EventSource(component=COMPONENT, host=self._node_name),
            reporting_component=COMPONENT, reporting_instance=self._node_name,
            first_timestamp=now, last_timestamp=now, count=1)
        self._core.create_namespaced_event(self._namespace, event, _request_timeout=self._timeout)
