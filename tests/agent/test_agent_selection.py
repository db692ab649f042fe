"""Which ConfigMap configures a node."""

from __future__ import annotations

from cri_resmgr_agent.backoff import Backoff
from cri_resmgr_agent.cluster_view import ClusterView
from cri_resmgr_agent.selection import ConfigMapData, ConfigMapNames, Selection, node_group, select_config

NAMES = ConfigMapNames("cfg")
LABEL = "example.com/group"


def maps(*names: str) -> dict[str, ConfigMapData]:
    return {n: ConfigMapData(n, str(i), {"policy": n}) for i, n in enumerate(names)}


def test_precedence_node_then_group_then_default():
    everything = maps("cfg.node.n1", "cfg.group.g", "cfg.default")
    assert select_config(NAMES, "n1", "g", everything).configmap == "cfg.node.n1"
    assert select_config(NAMES, "n2", "g", everything).configmap == "cfg.group.g"
    assert select_config(NAMES, "n2", "other", everything).configmap == "cfg.default"
    assert select_config(NAMES, "n2", None, everything).configmap == "cfg.default"
    assert select_config(NAMES, "n2", None, maps("cfg.group.g")) == Selection(None)


def test_selection_carries_the_map_data_only():
    chosen = select_config(NAMES, "n1", "g", maps("cfg.group.g", "cfg.default"))
    assert chosen == Selection("cfg.group.g", "0", {"policy": "cfg.group.g"})


def test_candidates():
    assert NAMES.is_candidate("cfg.node.n1", "n1") and NAMES.is_candidate("cfg.group.x", "n1")
    assert NAMES.is_candidate("cfg.default", "n1")
    assert not NAMES.is_candidate("cfg.node.n2", "n1") and not NAMES.is_candidate("cfg", "n1")
    assert not NAMES.is_candidate("other.default", "n1")


def test_group_from_label():
    assert node_group({LABEL: "g"}, LABEL) == "g"
    assert node_group({LABEL: ""}, LABEL) is None
    assert node_group(None, LABEL) is None


def test_view_selects_nothing_until_both_node_and_maps_were_read():
    seen: list[Selection] = []
    view = ClusterView(NAMES, "n1", LABEL, seen.append)
    view.configmaps_consumer.replace([{"metadata": {"name": "cfg.default", "resourceVersion": "1"},
                                       "data": {"a": "b"}}])
    assert seen == []
    view.node_consumer.replace([{"metadata": {"name": "n1", "labels": {}}}])
    assert seen == [Selection("cfg.default", "1", {"a": "b"})]
    # Changes that leave the selection as it was notify nothing.
    view.node_consumer.upsert({"metadata": {"name": "n1", "labels": {LABEL: "g"}}})
    view.configmaps_consumer.upsert({"metadata": {"name": "unrelated", "resourceVersion": "2"}})
    assert len(seen) == 1
    view.configmaps_consumer.upsert({"metadata": {"name": "cfg.group.g", "resourceVersion": "3"}, "data": {}})
    assert seen[-1] == Selection("cfg.group.g", "3", {})
    # A deleted Node keeps its last group.
    view.node_consumer.delete({"metadata": {"name": "n1"}})
    assert seen[-1].configmap == "cfg.group.g" and len(seen) == 2


def test_backoff_doubles_up_to_the_ceiling_and_resets():
    backoff = Backoff(1, 5)
    assert [backoff.next_delay() for _ in range(5)] == [1, 2, 4, 5, 5]
    backoff.reset()
    assert backoff.next_delay() == 1
