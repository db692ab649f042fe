"""The agent's Events are ones the API server takes (the fake validates them as the real one
does, tests/harness/kube_events.py), and a request the API server refuses for good is
logged once and not sent again."""

from __future__ import annotations

import logging

from cri_resmgr_agent.reporter import CONFIG_ERROR_ANNOTATION
from tests.harness.kubeapi import ApiError

NS = "kube-system"


def cfg(active: str) -> dict[str, str]:
    return {"policy": f"Active: {active}\n"}


def event_creates(api) -> list:
    return [r for r in api.requests if r.verb == "create" and r.path.endswith("/events")]


def test_the_agents_events_are_accepted_and_shown_with_the_nodes(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", {"bogus": ""})
    agent = make_agent()
    wait(lambda: agent.reporter.reported == 1, "the rejection reported")
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", cfg("ok"))
    wait(lambda: agent.reporter.reported == 2, "the acceptance reported")
    assert [r.code for r in event_creates(kubeapi)] == [201, 201]
    events = kubeapi.list_objects("events")
    assert [(e["metadata"]["namespace"], e["reason"], e["type"]) for e in
            sorted(events, key=lambda e: e["metadata"]["resourceVersion"])] == [
        ("default", "ConfigRejected", "Warning"), ("default", "ConfigApplied", "Normal")]
    for event in events:
        # What kubectl describe node looks for: the Node, by name, kind and uid, with no namespace.
        ref = event["involvedObject"]
        assert (ref["kind"], ref["name"], ref.get("namespace")) == ("Node", "node1", None)
        assert ref["uid"] == kubeapi.get_object("nodes", "", "node1")["metadata"]["uid"]
        assert event["source"] == {"component": "cri-resmgr-agent", "host": "node1"}
    assert agent.reporter.refused == 0


def test_a_refused_event_is_logged_once_and_not_retried(kubeapi, applier, make_agent, wait, caplog):
    allowed = kubeapi.authorizer
    kubeapi.authorizer = lambda verb, group, resource, ns, name: (
        resource != "events" and allowed(verb, group, resource, ns, name))
    caplog.set_level(logging.ERROR, logger="cri_resmgr_agent.reporter")
    kubeapi.put_node("node1")
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", {"bogus": ""})
    agent = make_agent()
    # Done with the report although its Event was refused: the refusal is final.
    wait(lambda: agent.reporter.reported == 1, "the report given up")
    assert [r.code for r in event_creates(kubeapi)] == [403]
    # The rest of the report went on: the annotation holds the rejection.
    annotations = kubeapi.get_object("nodes", "", "node1")["metadata"]["annotations"]
    assert "bogus" in annotations[CONFIG_ERROR_ANNOTATION]
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1
    assert "the Event about node node1 in namespace default: 403 Forbidden: " in refusals[0]
    assert 'cannot create resource "events"' in refusals[0] and "not retrying" in refusals[0]

    # The next outcome is reported: one more request, refused and logged once.
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", cfg("ok"))
    wait(lambda: agent.reporter.reported == 2, "the second report given up")
    assert [r.code for r in event_creates(kubeapi)] == [403, 403]
    assert agent.reporter.refused == 2
    assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 2
    assert CONFIG_ERROR_ANNOTATION not in (kubeapi.get_object("nodes", "", "node1")["metadata"].get("annotations")
                                           or {})


def test_a_server_error_is_retried_until_the_event_is_taken(kubeapi, applier, make_agent, wait):
    """5xx is not final: the same report is sent again until the API server takes it."""
    allowed = kubeapi.authorizer
    failures = [503, 500]

    def flaky(verb, group, resource, ns, name):
        if resource == "events" and failures:
            raise_status(failures.pop(0))
        return allowed(verb, group, resource, ns, name)

    kubeapi.authorizer = flaky
    kubeapi.put_node("node1")
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", cfg("ok"))
    agent = make_agent()
    wait(lambda: agent.reporter.reported == 1, "the report")
    assert [r.code for r in event_creates(kubeapi)] == [503, 500, 201]
    assert agent.reporter.refused == 0


def raise_status(code: int) -> None:
    raise ApiError(code, "ServiceUnavailable" if code == 503 else "InternalError", "try again")


def test_a_refusals_words_are_clipped_however_the_api_server_sends_them():
    # The reason and message of a Status body are logged; a 422's message names every
    # invalid field, and a body that is no Status is logged as it came: both bounded.
    import json

    from kubernetes.client.exceptions import ApiException

    from cri_resmgr_agent.reporter import refusal

    long = "x" * 100_000
    status = ApiException(status=422, reason="Unprocessable Entity")
    status.body = json.dumps({"kind": "Status", "reason": long, "message": long})
    code, reason, message = refusal(status)
    assert code == 422 and len(reason) <= 4000 and len(message) <= 4000  # was 100000 each
    plain = ApiException(status=400, reason=long)
    plain.body = long
    _, reason, message = refusal(plain)
    assert len(reason) <= 4000 and len(message) <= 4000
