"""The fake API server takes and refuses Events as the real one does (ValidateEventCreate in
kubernetes' pkg/apis/core/validation/events.go), through core/v1 and events.k8s.io/v1, with
the real `kubernetes` client; refusals are 422 Status bodies shaped like the real ones."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cri_resmgr_agent.kube import new_api_client
from tests.harness.kubeapi import FakeKubeAPI, rbac_authorizer

NOW = datetime(2026, 12, 4, 3, 0, 0, tzinfo=UTC)


@pytest.fixture
def apis(sockdir):
    api = FakeKubeAPI().start()
    api_client = new_api_client(api.write_kubeconfig(f"{sockdir}/kubeconfig"))
    yield api, client.CoreV1Api(api_client), client.EventsV1Api(api_client)
    api.stop()


def node_ref(**extra):
    return client.V1ObjectReference(kind="Node", api_version="v1", name="node1", uid="u1", **extra)


def legacy(name="node1.a", **fields):
    return client.CoreV1Event(metadata=client.V1ObjectMeta(name=name), involved_object=node_ref(),
                              reason="ConfigApplied", message="m", type="Normal",
                              source=client.V1EventSource(component="c", host="node1"),
                              first_timestamp=NOW, last_timestamp=NOW, count=1, **fields)


def refused(call) -> dict:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 422 and err.value.reason == "Unprocessable Entity"
    return json.loads(err.value.body)


def test_a_legacy_event_about_a_node_outside_default_is_refused_as_the_real_server_does(apis):
    # What the agent posted before: core/v1, no eventTime, about the Node, in kube-system.
    api, core, _ = apis
    status = refused(lambda: core.create_namespaced_event("kube-system", legacy()))
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Event "node1.a" is invalid: involvedObject.namespace: Invalid value: "": '
                   'does not match event.namespace',
        "reason": "Invalid", "code": 422,
        "details": {"name": "node1.a", "kind": "Event", "causes": [
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "": does not match event.namespace',
             "field": "involvedObject.namespace"}]}}
    assert api.list_objects("events") == []
    created = core.create_namespaced_event("default", legacy())
    assert created.metadata.namespace == "default" and created.metadata.uid


def test_a_legacy_event_about_a_namespaced_object_lives_in_its_namespace(apis):
    _, core, _ = apis

    def about_pod(namespace):
        event = legacy(name="p.1")
        event.involved_object = client.V1ObjectReference(kind="Pod", name="p", namespace="app")
        return core.create_namespaced_event(namespace, event)

    status = refused(lambda: about_pod("default"))
    assert status["message"] == ('Event "p.1" is invalid: involvedObject.namespace: Invalid value: "app": '
                                 'does not match event.namespace')
    assert about_pod("app").metadata.namespace == "app"


def test_a_core_event_with_event_time_needs_the_reporting_fields(apis):
    _, core, _ = apis
    event = client.CoreV1Event(metadata=client.V1ObjectMeta(name="node1.b"), involved_object=node_ref(),
                               reason="R", message="m", type="Normal", event_time=NOW)
    status = refused(lambda: core.create_namespaced_event("kube-system", event))
    assert status["message"].startswith('Event "node1.b" is invalid: [reportingController: Required value, '
                                        'reportingController: Invalid value: "": name part must be non-empty, ')
    assert status["message"].endswith(", reportingInstance: Required value, action: Required value]")
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("reportingController", "FieldValueRequired"), ("reportingController", "FieldValueInvalid"),
        ("reportingController", "FieldValueInvalid"), ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired")]
    event.reporting_component, event.reporting_instance, event.action = "example.com/agent", "node1", "Apply"
    # With eventTime, an Event about a cluster-scoped object may live in kube-system too, and no further.
    assert core.create_namespaced_event("kube-system", event).metadata.namespace == "kube-system"
    event.metadata.name = "node1.c"
    status = refused(lambda: core.create_namespaced_event("elsewhere", event))
    assert status["details"]["causes"][0]["field"] == "involvedObject.namespace"
    event.reporting_component, event.message = "not a name!", "x" * 1025
    status = refused(lambda: core.create_namespaced_event("default", event))
    assert [c["field"] for c in status["details"]["causes"]] == ["reportingController", "message"]
    assert status["details"]["causes"][1]["message"] == 'Invalid value: "": can have at most 1024 characters'


def v1_event(name="node1.d", **fields):
    values = {"metadata": client.V1ObjectMeta(name=name), "regarding": node_ref(), "reason": "ConfigApplied",
              "note": "applied", "type": "Normal", "event_time": NOW, "reporting_controller": "cri-resmgr-agent",
              "reporting_instance": "node1", "action": "Apply"}
    values.update(fields)
    return client.EventsV1Event(**values)


def post_raw(api: FakeKubeAPI, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {api.token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_an_events_k8s_io_event_is_validated_strictly(apis):
    api, _, events = apis
    created = events.create_namespaced_event("kube-system", v1_event())
    assert created.regarding.name == "node1" and created.note == "applied" and created.metadata.uid
    # One Event, both views: core/v1 sees it under its own field names.
    stored = api.get_object("events", "kube-system", "node1.d")
    assert stored["involvedObject"]["name"] == "node1" and stored["message"] == "applied"

    # The client's model insists on eventTime: a raw body leaves it out.
    raw = client.ApiClient().sanitize_for_serialization(v1_event(name="node1.e", type="Bogus", deprecated_count=2,
                                                                 deprecated_source=client.V1EventSource(component="c")))
    del raw["eventTime"]
    code, status = post_raw(api, "/apis/events.k8s.io/v1/namespaces/kube-system/events", raw)
    assert code == 422
    assert status["message"] == (
        # Without eventTime the legacy rule applies too: about a Node, only in default.
        'Event.events.k8s.io "node1.e" is invalid: [involvedObject.namespace: Invalid value: "": does not '
        'match event.namespace, eventTime: Required value, '
        'type: Invalid value: "": has invalid value: Bogus, count: Invalid value: "": needs to be unset, '
        'source: Invalid value: "": needs to be unset]')
    assert status["details"]["group"] == "events.k8s.io" and status["details"]["kind"] == "Event"

    status = refused(lambda: events.create_namespaced_event(
        "kube-system", v1_event(name="Node1_E", series=client.EventsV1EventSeries(count=1, last_observed_time=NOW))))
    assert [c["field"] for c in status["details"]["causes"]] == ["metadata.name", "series.count"]
    status = refused(lambda: events.create_namespaced_event(
        "kube-system", v1_event(name="node1.f", reporting_controller="", action="")))
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("reportingController", "FieldValueRequired"), ("reportingController", "FieldValueInvalid"),
        ("reportingController", "FieldValueInvalid"), ("action", "FieldValueRequired")]
    assert status["details"]["causes"][1]["message"] == 'Invalid value: "": name part must be non-empty'


def test_rbac_tells_the_events_api_group_from_the_core_group(sockdir):
    authorize = rbac_authorizer({"default": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]}, [])
    api = FakeKubeAPI(authorizer=authorize).start()
    try:
        api_client = new_api_client(api.write_kubeconfig(f"{sockdir}/kc"))
        client.CoreV1Api(api_client).create_namespaced_event("default", legacy())
        with pytest.raises(ApiException) as err:
            client.EventsV1Api(api_client).create_namespaced_event("default", v1_event())
        assert err.value.status == 403
        assert 'in API group "events.k8s.io"' in json.loads(err.value.body)["message"]
    finally:
        api.stop()
