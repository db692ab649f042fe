"""Affinity and anti-affinity across pods of a namespace, both ways round."""

from __future__ import annotations

import pytest
from ta_testkit import make, wl

from cri_resmgr.policy.topology_aware.affinity import Rule, parse_rules, pool_scores, rule_weight
from cri_resmgr.policy.topology_aware.memory import AnnotationError
from tests.harness.sysfs import fake_topology

AFFINE_DB = "- match: {key: app, operator: Equals, values: [db]}\n  weight: 10"


@pytest.fixture
def topo():
    return fake_topology(sockets=2, cores_per_die=4, numa_per_socket=2)


def pool(policy, key):
    return policy.assignment(key).pool


def test_two_affine_containers_of_different_pods_share_a_pool(topo):
    policy = make(topo)
    policy.allocate(wl("db", "Burstable", 500, pod="db-0", namespace="shop", labels={"app": "db"}))
    for i in range(3):  # fillers that balance would otherwise spread the web pod away with
        policy.allocate(wl(f"f{i}", "Burstable", 200, namespace="shop"))
    policy.allocate(wl("web", "Burstable", 500, pod="web-0", namespace="shop", labels={"app": "web"},
                       annotations={"affinity": AFFINE_DB}))
    assert pool(policy, "web") == pool(policy, "db")


def test_affinity_declared_by_the_first_pod_pulls_the_second(topo):
    policy = make(topo)
    policy.allocate(wl("web", "Burstable", 500, pod="web-0", namespace="shop", labels={"app": "web"},
                       annotations={"affinity": AFFINE_DB}))
    policy.allocate(wl("other", "Burstable", 500, namespace="shop"))
    policy.allocate(wl("db", "Burstable", 500, pod="db-0", namespace="shop", labels={"app": "db"}))
    assert pool(policy, "db") == pool(policy, "web")


def test_anti_affine_containers_land_in_different_pools_while_capacity_allows(topo):
    policy = make(topo)
    anti = "- match: {key: app, operator: Equals, values: [db]}"
    keys = []
    for i in range(4):  # four leaves: four replicas apart
        key = f"db{i}"
        keys.append(key)
        # Each replica is placed as if balance would put it next to the last one: affinity must win.
        policy.allocate(wl(key, "Guaranteed", 1000, pod=f"db-{i}", namespace="shop", labels={"app": "db"},
                           annotations={"anti-affinity": anti}))
    assert len({pool(policy, k) for k in keys}) == 4
    policy.allocate(wl("db4", "Guaranteed", 1000, pod="db-4", namespace="shop", labels={"app": "db"},
                       annotations={"anti-affinity": anti}))
    assert policy.assignment("db4").exclusive, "with no room apart it is still placed"


def test_anti_affinity_beats_balance(topo):
    policy = make(topo)
    policy.allocate(wl("a", "Burstable", 3000, labels={"app": "a"}))
    # Balance alone would put b in an emptier leaf: affinity must win over it; then c,
    # anti-affine to both, must leave their leaf although it is not the fullest.
    policy.allocate(wl("b", "Burstable", 100, labels={"app": "b"},
                       annotations={"affinity": "- match: {key: app, operator: Equals, values: [a]}"}))
    assert pool(policy, "b") == pool(policy, "a")
    policy.allocate(wl("c", "Burstable", 100, labels={"app": "c"},
                       annotations={"anti-affinity": "- match: {key: app, operator: In, values: [a, b]}"}))
    assert pool(policy, "c") != pool(policy, "a")


def test_scope_defaults_to_the_namespace_and_can_widen(topo):
    policy = make(topo)
    policy.allocate(wl("db", "Burstable", 500, namespace="other", labels={"app": "db"}))
    policy.allocate(wl("f", "Burstable", 2000))
    policy.allocate(wl("web", "Burstable", 500, namespace="shop", annotations={"affinity": AFFINE_DB}))
    assert pool(policy, "web") != pool(policy, "db"), "a db in another namespace is out of scope"
    cross = "- scope: {key: namespace, operator: In, values: [other]}\n  match: {key: app, operator: In, values: [db]}"
    policy.allocate(wl("web2", "Burstable", 500, namespace="shop", annotations={"affinity": cross}))
    assert pool(policy, "web2") == pool(policy, "db")


def test_container_keyed_annotation_and_effective_key(topo):
    w = wl("web", annotations={"affinity": "web:\n  - match: {key: app, operator: Exists}\nsidecar: []"})
    assert parse_rules(w) == (Rule(match=parse_rules(w)[0].match, weight=1),)
    w = wl("web", annotations={"affinity/container.web": AFFINE_DB, "affinity": "[]"})
    assert parse_rules(w)[0].weight == 10
    assert parse_rules(wl("x", annotations={"anti-affinity": AFFINE_DB}))[0].weight == -10


@pytest.mark.parametrize(("text", "message"), [
    ("{{", "affinity: not YAML"),
    ("- 3", "affinity[0]: expected a mapping"),
    ("- match: {key: app, operator: Bogus}", "affinity[0].match.operator"),
    ("- weight: 2", "affinity[0].match: missing"),
    ("- match: {key: a, operator: Exists}\n  weight: -1", "affinity[0].weight"),
    ("- match: {key: a, operator: Exists}\n  colour: red", "affinity[0].colour: unknown field"),
    ("42", "expected a list"),
])
def test_malformed_affinity_is_named(text, message):
    with pytest.raises(AnnotationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_rules(wl("x", annotations={"affinity": text}))


def test_malformed_affinity_is_a_warning_not_a_failure(topo):
    d = make(topo).allocate(wl("x", "Burstable", 100, annotations={"affinity": "- match: 3"}))
    assert d.resources is not None and "ignoring annotation affinity[0].match" in d.warning


def test_rule_weight_counts_both_directions():
    a = wl("a", labels={"app": "a"}, annotations={"affinity": "- match: {key: app, operator: Equals, values: [b]}"})
    b = wl("b", labels={"app": "b"})
    assert rule_weight(b, (), a, parse_rules(a)) == 1
    assert rule_weight(a, parse_rules(a), b, ()) == 1
    assert rule_weight(b, parse_rules(a), a, parse_rules(a)) == 1


def test_pool_scores_full_weight_in_the_pool_half_above_and_below(topo):
    tree = make(topo).tree
    scores = pool_scores([(tree["node0"], 4)], tree.pools)
    assert scores["node0"] == 4 and scores["package0"] == 2 and scores["root"] == 2
    assert scores["node1"] == 0 and scores["node2"] == 0


def test_colocate_pods_and_namespaces(topo):
    policy = make(topo, ColocatePods=True)
    policy.allocate(wl("a1", "Burstable", 500, pod="a"))
    policy.allocate(wl("a2", "Burstable", 500, pod="a"))
    policy.allocate(wl("b1", "Burstable", 500, pod="b"))
    assert pool(policy, "a1") == pool(policy, "a2") != pool(policy, "b1")
    policy = make(topo, ColocateNamespaces=True)
    for i in range(3):
        policy.allocate(wl(f"n{i}", "Burstable", 500, namespace="ns"))
    assert len({pool(policy, f"n{i}") for i in range(3)}) == 1
    policy.release("n0")
    policy.release("n1")
    policy.release("n2")
    assert not policy._by_ns and not policy._by_pod
