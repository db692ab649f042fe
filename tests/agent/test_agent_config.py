"""The agent configures the relay from ConfigMaps: real kubernetes client against
the fake API server (under the deployment's RBAC), real Config gRPC service."""

from __future__ import annotations

import pytest

NS = "kube-system"
EVENT_NS = "default"  # where Events about a Node belong
LABEL = "cri-resource-manager.intel.com/group"


def cfg(active: str) -> dict[str, str]:
    return {"policy": f"Active: {active}\n"}


def put(api, suffix: str, data: dict[str, str]) -> None:
    api.put_configmap(NS, f"cri-resmgr-config.{suffix}", data)


def delete(api, suffix: str) -> None:
    api.delete_configmap(NS, f"cri-resmgr-config.{suffix}")


def node_annotations(api, name: str = "node1") -> dict[str, str]:
    return api.get_object("nodes", "", name)["metadata"].get("annotations") or {}


def node_events(api, reason: str) -> list[dict]:
    return [e for e in api.list_objects("events", EVENT_NS)
            if e["reason"] == reason and e["involvedObject"]["name"] == "node1"]


def test_node_map_beats_group_map_beats_default(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1", {LABEL: "g1"})
    put(kubeapi, "default", cfg("default"))
    put(kubeapi, "group.g1", cfg("group"))
    put(kubeapi, "group.g2", cfg("other-group"))
    put(kubeapi, "node.node1", cfg("node"))
    put(kubeapi, "node.node2", cfg("other-node"))
    agent = make_agent()
    wait(lambda: applier.config == cfg("node"), "the node map")
    delete(kubeapi, "node.node1")
    wait(lambda: applier.config == cfg("group"), "the group map once the node map is gone")
    delete(kubeapi, "group.g1")
    wait(lambda: applier.config == cfg("default"), "the default map once the group map is gone")
    assert applier.sources[-1] == "configmap kube-system/cri-resmgr-config.default"
    assert agent.readiness.get() == (True, "configmap kube-system/cri-resmgr-config.default in force")
    # Every configuration was delivered exactly once, in order, and no other node's or group's.
    assert applier.attempts == [cfg("node"), cfg("group"), cfg("default")]


def test_chosen_map_replaces_the_others_entirely(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1", {LABEL: "g1"})
    put(kubeapi, "default", {"policy": "Active: default\n", "logger": "Debug: true\n"})
    put(kubeapi, "group.g1", {"dump": "Config: full\n"})
    make_agent()
    wait(lambda: applier.attempts, "a configuration")
    assert applier.config == {"dump": "Config: full\n"}


def test_node_moves_between_groups(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1", {LABEL: "g1"})
    put(kubeapi, "default", cfg("default"))
    put(kubeapi, "group.g1", cfg("g1"))
    put(kubeapi, "group.g2", cfg("g2"))
    make_agent()
    wait(lambda: applier.config == cfg("g1"), "group g1")
    kubeapi.set_node_labels("node1", {LABEL: "g2"})
    wait(lambda: applier.config == cfg("g2"), "group g2 after relabelling")
    kubeapi.set_node_labels("node1", {LABEL: "g3"})  # a group without a map
    wait(lambda: applier.config == cfg("default"), "the default for a group without a map")
    kubeapi.set_node_labels("node1", {"unrelated": "x"})
    kubeapi.set_node_labels("node1", {})
    kubeapi.set_node_labels("node1", {LABEL: "g1"})
    wait(lambda: applier.config == cfg("g1"), "group g1 again")
    assert applier.attempts == [cfg("g1"), cfg("g2"), cfg("default"), cfg("g1")]


def test_maps_created_changed_and_deleted(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    agent = make_agent()
    # No map at all: the relay is told that no agent configuration applies.
    wait(lambda: applier.sources == ["no configmap for node node1 in namespace kube-system"], "the empty push")
    assert applier.config == {} and agent.readiness.get()[0]
    put(kubeapi, "default", cfg("a"))
    wait(lambda: applier.config == cfg("a"), "the created map")
    put(kubeapi, "default", cfg("b"))
    wait(lambda: applier.config == cfg("b"), "the changed map")
    put(kubeapi, "node.node1", {"logger": "Debug: true\n"})
    wait(lambda: applier.config == {"logger": "Debug: true\n"}, "the node's own map")
    delete(kubeapi, "node.node1")
    wait(lambda: applier.config == cfg("b"), "back to the default")
    delete(kubeapi, "default")
    wait(lambda: applier.config == {} and len(applier.attempts) == 6, "nothing again")


def test_unchanged_data_is_not_pushed_again(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1", {LABEL: "g1"})
    put(kubeapi, "default", cfg("same"))
    agent = make_agent()
    wait(lambda: applier.attempts == [cfg("same")], "the first push")
    put(kubeapi, "group.g8", {})
    wait(lambda: "cri-resmgr-config.group.g8" in agent.view.known_configmaps(), "a watch event")
    # Watch expiry: the watches end with 410 Gone; the map watch, past its listed version, lists again.
    kubeapi.expire_watches()
    wait(lambda: agent.configmap_reflector.relists == 2 and agent.node_reflector.expirations, "410 Gone handled")
    kubeapi.compact()  # moves the version on without a change to a watched object
    kubeapi.bookmark()
    wait(lambda: agent.configmap_reflector.version == kubeapi.resource_version, "the bookmark's version")
    # The same data under another name, an unrelated group's map, and a node update.
    put(kubeapi, "group.g1", cfg("same"))
    put(kubeapi, "group.g9", cfg("elsewhere"))
    kubeapi.set_node_labels("node1", {LABEL: "g1", "other": "label"})
    wait(lambda: "cri-resmgr-config.group.g9" in agent.view.known_configmaps(), "the agent to see the new maps")
    wait(lambda: agent.view.selection.configmap == "cri-resmgr-config.group.g1", "the agent to select g1")
    assert applier.attempts == [cfg("same")]
    assert agent.pusher.pushes == 1


def test_invalid_yaml_is_rejected_and_surfaced(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    put(kubeapi, "default", cfg("good"))
    agent = make_agent()
    wait(lambda: agent.readiness.get()[0], "readiness with a good configuration")
    put(kubeapi, "node.node1", {"policy": "Active: [unclosed\n"})
    wait(lambda: len(applier.attempts) == 2, "the bad push")
    assert applier.config == cfg("good"), "the old configuration stays in force"
    ready, reason = wait(lambda: (lambda r: r if not r[0] else None)(agent.readiness.get()), "not ready")
    assert "cri-resmgr-config.node.node1 rejected" in reason and "invalid YAML" in reason
    error = wait(lambda: node_annotations(kubeapi).get("cri-resource-manager.intel.com/config-error"),
                 "the error annotation on the node")
    assert 'module "policy": invalid YAML' in error
    event = wait(lambda: node_events(kubeapi, "ConfigRejected"), "a Warning event on the node")[0]
    assert event["type"] == "Warning" and "invalid YAML" in event["message"]
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["uid"] == kubeapi.get_object("nodes", "", "node1")["metadata"]["uid"]
    # Fixing the map makes the agent ready again and clears the annotation.
    put(kubeapi, "node.node1", cfg("fixed"))
    wait(lambda: applier.config == cfg("fixed"), "the fixed configuration")
    wait(lambda: agent.readiness.get()[0], "ready again")
    wait(lambda: "cri-resource-manager.intel.com/config-error" not in node_annotations(kubeapi),
         "the error annotation removed")


def test_unknown_modules_and_keys_are_rejected(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    put(kubeapi, "default", cfg("good"))
    agent = make_agent()
    wait(lambda: applier.config == cfg("good"), "the good configuration")
    put(kubeapi, "default", {"policy": "Active: x\n", "bogus": "a: b\n"})
    wait(lambda: "unknown configuration module \"bogus\"" in agent.readiness.get()[1], "rejection of module")
    put(kubeapi, "default", {"policy": "Active: x\nNoSuchKey: 1\n"})
    wait(lambda: "unknown key(s) NoSuchKey" in agent.readiness.get()[1], "rejection of the key")
    assert applier.config == cfg("good")
    assert not agent.readiness.get()[0]
    wait(lambda: "NoSuchKey" in node_annotations(kubeapi).get("cri-resource-manager.intel.com/config-error", ""),
         "the newest error on the node")


def test_rejected_configuration_is_not_retried_until_it_changes(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    put(kubeapi, "default", {"bogus": ""})
    agent = make_agent()
    wait(lambda: not agent.readiness.get()[0] and "bogus" in agent.readiness.get()[1], "the rejection")
    kubeapi.expire_watches()
    wait(lambda: agent.configmap_reflector.expirations, "410 Gone handled")
    put(kubeapi, "group.gx", {})
    wait(lambda: "cri-resmgr-config.group.gx" in agent.view.known_configmaps(), "the unrelated map")
    assert applier.attempts == [{"bogus": ""}]


def test_api_server_down_at_start(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    put(kubeapi, "default", cfg("late"))
    kubeapi.down()
    agent = make_agent()
    wait(lambda: agent.configmap_reflector.failing and agent.node_reflector.failing, "failing reflectors")
    assert applier.attempts == []
    assert agent.readiness.get()[0] is False
    kubeapi.up()
    wait(lambda: applier.config == cfg("late"), "the configuration once the API server is up")
    wait(lambda: not agent.configmap_reflector.failing, "recovery")


def test_api_server_down_in_the_middle_keeps_the_configuration(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1", {LABEL: "g1"})
    put(kubeapi, "group.g1", cfg("g1"))
    agent = make_agent()
    wait(lambda: applier.config == cfg("g1"), "the first configuration")
    wait(lambda: agent.readiness.get()[0], "readiness")
    kubeapi.down()
    wait(lambda: agent.configmap_reflector.failing and agent.node_reflector.failing, "the outage noticed")
    # Changes made while the agent cannot see them ...
    put(kubeapi, "group.g1", cfg("changed-during-outage"))
    assert agent.readiness.get()[0], "an outage does not make a good configuration bad"
    kubeapi.up()
    # ... arrive once it can, with no flapping in between.
    wait(lambda: applier.config == cfg("changed-during-outage"), "the change after the outage")
    assert applier.attempts == [cfg("g1"), cfg("changed-during-outage")]


def test_api_server_outage_with_compaction_relists_without_pushing(kubeapi, applier, make_agent, wait):
    kubeapi.put_node("node1")
    put(kubeapi, "default", cfg("one"))
    agent = make_agent()
    wait(lambda: applier.attempts == [cfg("one")], "the first push")
    kubeapi.down()
    wait(lambda: agent.configmap_reflector.failing, "the outage noticed")
    kubeapi.compact()
    kubeapi.up()
    put(kubeapi, "group.unrelated", {})
    wait(lambda: "cri-resmgr-config.group.unrelated" in agent.view.known_configmaps(), "the agent to catch up")
    assert applier.attempts == [cfg("one")]
    # The Node, read with get, keeps its pre-compaction version: its watch must still
    # work (from the current state), not list again and again.
    put(kubeapi, "group.g2", cfg("two"))
    kubeapi.set_node_labels("node1", {LABEL: "g2"})
    wait(lambda: applier.config == cfg("two"), "the node's move to g2")
    assert agent.node_reflector.relists <= 2 and agent.configmap_reflector.relists <= 2
    assert applier.attempts == [cfg("one"), cfg("two")]


@pytest.mark.parametrize("stale_socket", [False, True], ids=["no-socket", "stale-socket"])
def test_relay_down_then_back(kubeapi, relay, make_agent, wait, stale_socket):
    kubeapi.put_node("node1")
    put(kubeapi, "default", cfg("waiting"))
    relay.stop(leave_stale_socket=stale_socket)
    agent = make_agent()
    wait(lambda: "not delivered" in agent.readiness.get()[1], "the undelivered state")
    assert not agent.readiness.get()[0]
    put(kubeapi, "default", cfg("newest"))
    wait(lambda: agent.view.selection and agent.view.selection.data == cfg("newest"), "the newer selection")
    relay.start()
    wait(lambda: relay.applier.config == cfg("newest"), "delivery once the relay is back")
    wait(lambda: agent.readiness.get()[0], "readiness")
    assert relay.applier.attempts == [cfg("newest")]


def test_agent_works_with_the_deployment_rbac_only(kubeapi, applier, make_agent, wait):
    """The fixture's API server enforces agent-rbac.yaml: nothing the agent did was forbidden."""
    kubeapi.put_node("node1")
    put(kubeapi, "default", {"bogus": ""})
    make_agent()
    wait(lambda: node_events(kubeapi, "ConfigRejected"), "the rejection event")
    put(kubeapi, "default", cfg("ok"))
    wait(lambda: node_events(kubeapi, "ConfigApplied"), "the applied event")
    verbs = {(r.verb, r.path.split("/")[4] if r.path.startswith("/api/v1/namespaces/") else "cluster")
             for r in kubeapi.requests}
    assert verbs <= {("list", "kube-system"), ("watch", "kube-system"), ("create", "default"),
                     ("get", "cluster"), ("watch", "cluster"), ("patch", "cluster")}, verbs
    assert [r for r in kubeapi.requests if r.code == 403] == []
