"""The fake API server speaks the protocol the real `kubernetes` client expects."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from cri_resmgr_agent.kube import new_api_client
from tests.harness.kubeapi import FakeKubeAPI, merge_patch, parse_label_selector

NS = "kube-system"


@pytest.fixture
def open_api(sockdir):
    """A fake API server without RBAC, and a CoreV1Api talking to it through a kubeconfig."""
    api = FakeKubeAPI().start()
    core = client.CoreV1Api(new_api_client(api.write_kubeconfig(f"{sockdir}/kubeconfig")))
    yield api, core
    api.stop()


def test_list_with_label_and_field_selectors(open_api):
    api, core = open_api
    api.put_node("a", {"zone": "x", "tier": "gold"})
    api.put_node("b", {"zone": "y"})
    api.put_node("c", {"zone": "x"})
    names = lambda nodes: [n.metadata.name for n in nodes.items]  # noqa: E731
    assert names(core.list_node(label_selector="zone=x")) == ["a", "c"]
    assert names(core.list_node(label_selector="zone in (x,y),!tier")) == ["b", "c"]
    assert names(core.list_node(field_selector="metadata.name=b")) == ["b"]
    assert names(core.list_node(field_selector="metadata.name!=b", label_selector="tier")) == ["a"]
    listed = core.list_node()
    assert int(listed.metadata.resource_version) >= max(int(n.metadata.resource_version) for n in listed.items)


def test_bad_selector_is_a_400_naming_it(open_api):
    api, core = open_api
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="spec.unschedulable=true")
    assert err.value.status == 400 and "spec.unschedulable" in json.loads(err.value.body)["message"]


def test_missing_token_is_unauthorized(open_api, sockdir):
    api, _ = open_api
    anonymous = client.Configuration()
    anonymous.host = api.url
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(client.ApiClient(anonymous)).list_node()
    assert err.value.status == 401


def test_watch_streams_changes_from_a_version(open_api):
    api, core = open_api
    api.put_configmap(NS, "one", {"k": "1"})
    version = core.list_namespaced_config_map(NS).metadata.resource_version
    api.put_configmap(NS, "one", {"k": "2"})
    api.put_configmap(NS, "two", {"k": "x"})
    api.delete_configmap(NS, "one")
    api.put_configmap("default", "elsewhere", {})
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_config_map, NS, resource_version=version, timeout_seconds=30):
        seen.append((event["type"], event["object"].metadata.name, (event["object"].data or {}).get("k")))
        if len(seen) == 3:
            w.stop()
    assert seen == [("MODIFIED", "one", "2"), ("ADDED", "two", "x"), ("DELETED", "one", "2")]


def test_watch_without_version_starts_with_the_current_objects(open_api):
    api, core = open_api
    api.put_node("a")
    w = watch.Watch()
    events = w.stream(core.list_node, timeout_seconds=30)
    first = next(events)
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "a")
    api.set_node_labels("a", {"x": "y"})
    second = next(events)
    assert second["type"] == "MODIFIED" and second["object"].metadata.labels == {"x": "y"}
    w.stop()


def test_watch_from_a_compacted_version_is_410_gone(open_api):
    api, core = open_api
    api.put_node("a")
    version = core.list_node().metadata.resource_version
    api.compact()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=version, timeout_seconds=30))
    assert err.value.status == 410
    # A fresh list gives a version to watch from again.
    fresh = core.list_node().metadata.resource_version
    w = watch.Watch()
    stream = w.stream(core.list_node, resource_version=fresh, timeout_seconds=30)
    api.set_node_labels("a", {"after": "compaction"})
    assert next(stream)["object"].metadata.labels == {"after": "compaction"}
    w.stop()


def test_expiring_watches_end_open_streams_with_410(open_api, wait):
    api, core = open_api
    api.put_node("a")
    version = core.list_node().metadata.resource_version
    errors = []

    def watch_nodes():
        try:
            for _ in watch.Watch().stream(core.list_node, resource_version=version, timeout_seconds=60):
                pass
        except ApiException as exc:
            errors.append(exc.status)

    thread = threading.Thread(target=watch_nodes)
    thread.start()
    wait(lambda: api.count_requests("watch", "/nodes") == 1, "the watch to open")
    api.expire_watches()
    thread.join()
    assert errors == [410]


def test_bookmarks_only_when_allowed(open_api):
    api, core = open_api
    api.put_node("a")
    version = core.list_node().metadata.resource_version
    w = watch.Watch()
    stream = w.stream(core.list_node, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=30)
    api.put_node("b")
    assert next(stream)["object"].metadata.name == "b"  # the watch is open now
    api.bookmark()
    event = next(stream)
    assert event["type"] == "BOOKMARK"
    assert w.resource_version == str(api.list_objects("nodes")[-1]["metadata"]["resourceVersion"])
    w.stop()
    # Without allowWatchBookmarks, the bookmark is not sent.
    w2 = watch.Watch()
    stream2 = w2.stream(core.list_node, resource_version=version, timeout_seconds=30)
    first = next(stream2)
    assert first["type"] == "ADDED" and first["object"].metadata.name == "b"
    w2.stop()


def test_watch_ends_after_timeout_seconds(open_api):
    api, core = open_api
    version = core.list_node().metadata.resource_version
    assert list(watch.Watch().stream(core.list_node, resource_version=version, timeout_seconds=1)) == []


def test_merge_patch_with_resource_version_precondition(open_api):
    api, core = open_api
    node = api.put_node("a", {"keep": "1", "drop": "2"})
    patched = core.patch_node("a", {"metadata": {"labels": {"drop": None, "new": "3"},
                                                 "resourceVersion": node["metadata"]["resourceVersion"]}},
                              _content_type="application/merge-patch+json")
    assert patched.metadata.labels == {"keep": "1", "new": "3"}
    with pytest.raises(ApiException) as err:
        core.patch_node("a", {"metadata": {"labels": {"x": "y"},
                                           "resourceVersion": node["metadata"]["resourceVersion"]}},
                        _content_type="application/merge-patch+json")
    assert err.value.status == 409


def test_status_is_patched_only_through_its_subresource(open_api):
    api, core = open_api
    api.put_node("a")
    core.patch_node("a", {"status": {"capacity": {"example.com/x": "1"}}},
                    _content_type="application/strategic-merge-patch+json")
    assert "example.com/x" not in api.get_object("nodes", "", "a")["status"]["capacity"]
    core.patch_node_status("a", {"status": {"capacity": {"example.com/x": "1"}}},
                           _content_type="application/merge-patch+json")
    assert api.get_object("nodes", "", "a")["status"]["capacity"]["example.com/x"] == "1"


def test_json_patch_is_refused_clearly(open_api):
    api, core = open_api
    api.put_node("a")
    with pytest.raises(ApiException) as err:
        core.patch_node("a", [{"op": "add", "path": "/metadata/labels/x", "value": "y"}])
    assert err.value.status == 415 and "json-patch" in json.loads(err.value.body)["message"]


def test_events_are_created_with_generated_names(open_api):
    api, core = open_api
    event = core.create_namespaced_event("default", client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="node1."),
        involved_object=client.V1ObjectReference(kind="Node", name="node1"), reason="Test", message="hi"))
    assert event.metadata.name.startswith("node1.") and event.metadata.namespace == "default"
    assert [e["reason"] for e in api.list_objects("events", "default")] == ["Test"]


def test_down_refuses_connections_and_up_serves_the_same_store(open_api):
    api, core = open_api
    api.put_node("a")
    api.down()
    with pytest.raises(Exception):  # noqa: B017 (urllib3's connection errors vary by version)
        core.list_node(_request_timeout=5)
    api.up()
    assert [n.metadata.name for n in core.list_node().items] == ["a"]


def test_rbac_authorizer_denies_what_the_rules_do_not_grant(sockdir):
    from tests.harness.kubeapi import rbac_authorizer
    authorize = rbac_authorizer({NS: [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}, [])
    api = FakeKubeAPI(authorizer=authorize).start()
    try:
        core = client.CoreV1Api(new_api_client(api.write_kubeconfig(f"{sockdir}/kc")))
        api.put_configmap(NS, "c", {})
        api.put_configmap("default", "c", {})
        assert core.read_namespaced_config_map("c", NS).metadata.name == "c"
        for call in (lambda: core.read_namespaced_config_map("c", "default"),
                     lambda: core.list_namespaced_config_map(NS)):
            with pytest.raises(ApiException) as err:
                call()
            assert err.value.status == 403
    finally:
        api.stop()


def test_merge_patch_and_label_selector_helpers():
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == \
        {"a": {"c": 2, "d": 3}, "l": [2]}
    match = parse_label_selector("a=1,b!=2,c notin (x, y)")
    assert match({"a": "1", "c": "z"}) and not match({"a": "1", "b": "2"}) and not match({"a": "1", "c": "x"})
