"""Makes the relay's answers visible on the cluster.

A rejected configuration sets the node annotation CONFIG_ERROR_ANNOTATION to
the error and records a Warning Event on the Node; an accepted one removes the
annotation and records a Normal Event. Reports are retried with backoff while
the API server is down; only the newest outcome matters, so a newer one
replaces one not yet reported.

The Event is a core/v1 Event in EVENT_NAMESPACE ("default"), as kubelet posts its
own Node events: the API server refuses a core/v1 Event without eventTime about a
cluster-scoped object in any other namespace (422 "involvedObject.namespace ...
does not match event.namespace"), and there kubectl shows it beside kubelet's
(docs/agent.md says why not events.k8s.io/v1).

An API server's 4xx answer (but 408 and 429, which ask to come back) is final for
that request: it is logged once, naming the status and reason, and not sent again;
the rest of the report still goes. A 5xx or a failed connection is retried.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cri_resmgr_agent.backoff import Backoff
from cri_resmgr_agent.kube import body
from cri_resmgr_agent.pusher import PushOutcome

log = logging.getLogger(__name__)

CONFIG_ERROR_ANNOTATION = "cri-resource-manager.intel.com/config-error"
COMPONENT = "cri-resmgr-agent"
EVENT_NAMESPACE = "default"
# Kubernetes caps annotation values and event messages; keep errors well within.
_MAX_TEXT = 4000
# 4xx answers that ask the client to come back later.
_RETRYABLE_4XX = (408, 429)


def refusal(exc: BaseException) -> tuple[int, str, str] | None:
    """(status, reason, message) when `exc` is the API server's final refusal, else None."""
    if not isinstance(exc, ApiException) or not isinstance(exc.status, int):
        return None
    if not 400 <= exc.status < 500 or exc.status in _RETRYABLE_4XX:
        return None
    reason, message = str(exc.reason or ""), ""
    try:
        status = json.loads(exc.body or "")
        if isinstance(status, dict):
            reason = str(status.get("reason") or reason)
            message = str(status.get("message") or "")
    except (ValueError, TypeError):
        message = str(exc.body or "")
    # Logged: a 422's message names every invalid field, and the body is the API server's.
    return exc.status, reason[:_MAX_TEXT], message[:_MAX_TEXT]


class ClusterReporter:
    def __init__(self, core: client.CoreV1Api, node_name: str, backoff: Backoff,
                 stop: threading.Event, request_timeout: float = 30.0) -> None:
        self._core = core
        self._node_name = node_name
        self._backoff = backoff
        self._stop = stop
        self._timeout = request_timeout
        self._cond = threading.Condition()
        self._pending: PushOutcome | None = None
        self.reported = 0  # outcomes done with: published, or refused for good
        self.refused = 0  # requests the API server refused for good

    def report(self, outcome: PushOutcome) -> None:
        with self._cond:
            self._pending = outcome
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        failing = False
        while not self._stop.is_set():
            with self._cond:
                self._cond.wait_for(lambda: self._stop.is_set() or self._pending is not None)
                if self._stop.is_set():
                    return
                outcome = self._pending
            assert outcome is not None
            steps = self._steps(outcome)
            try:
                while steps:
                    self._attempt(steps[0])
                    steps.pop(0)
            except Exception as exc:
                if not failing:
                    log.warning("cannot report the configuration outcome to the cluster: %s; retrying", exc)
                    failing = True
                delay = self._backoff.next_delay()
                with self._cond:
                    self._cond.wait_for(self._stop.is_set, timeout=delay)
                continue
            if failing:
                log.info("reporting the configuration outcome to the cluster works again")
                failing = False
            self._backoff.reset()
            with self._cond:
                if self._pending is outcome:
                    self._pending = None
                self.reported += 1

    def _attempt(self, step: tuple[str, Callable[[], None]]) -> None:
        """Runs one step; a final refusal is logged and ends the step, anything else propagates."""
        what, call = step
        try:
            call()
        except Exception as exc:
            refused = refusal(exc)
            if refused is None:
                raise
            code, reason, message = refused
            self.refused += 1
            log.error("the API server refused %s: %d %s: %s; not retrying it", what, code, reason, message)

    def _steps(self, outcome: PushOutcome) -> list[tuple[str, Callable[[], None]]]:
        error = outcome.error[:_MAX_TEXT] if outcome.error else None
        uid: list[str | None] = [None]

        def annotate() -> None:
            patch = {"metadata": {"annotations": {CONFIG_ERROR_ANNOTATION: error}}}
            response = self._core.patch_node(self._node_name, patch, _content_type="application/merge-patch+json",
                                             _preload_content=False, _request_timeout=self._timeout)
            uid[0] = json.loads(body(response))["metadata"].get("uid")

        def record() -> None:
            self._core.create_namespaced_event(EVENT_NAMESPACE, self._event(outcome, error, uid[0]),
                                               _request_timeout=self._timeout)

        return [(f"the annotation {CONFIG_ERROR_ANNOTATION} on node {self._node_name}", annotate),
                (f"the Event about node {self._node_name} in namespace {EVENT_NAMESPACE}", record)]

    def _event(self, outcome: PushOutcome, error: str | None, uid: str | None) -> client.CoreV1Event:
        now = datetime.now(UTC)
        if error:
            reason, kind, message = "ConfigRejected", "Warning", f"{outcome.source} rejected by cri-resmgr: {error}"
        else:
            reason, kind, message = "ConfigApplied", "Normal", f"{outcome.source} applied by cri-resmgr"
        # No eventTime: with it, the API server would want the events.k8s.io fields (action, ...).
        # The Node has no namespace, so neither has the reference (kubectl describe node looks there).
        return client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{self._node_name}.{time.time_ns():x}{uuid.uuid4().hex[:4]}",
                                         namespace=EVENT_NAMESPACE),
            involved_object=client.V1ObjectReference(kind="Node", api_version="v1", name=self._node_name,
                                                     uid=uid),
            reason=reason, message=message[:_MAX_TEXT], type=kind,
            source=client.V1EventSource(component=COMPONENT, host=self._node_name),
            reporting_component=COMPONENT, reporting_instance=self._node_name,
            first_timestamp=now, last_timestamp=now, count=1)
