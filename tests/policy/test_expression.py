"""The expression language shared by affinity and balloon matching."""

from __future__ import annotations

import pytest

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.expression import ExpressionError, parse, parse_list, resolve

W = Workload(key="k", namespace="prod", pod="db-0", name="postgres", qos=QoS.GUARANTEED,
             labels={"app": "db", "tier": "backend"})


@pytest.mark.parametrize("key,value", [
    ("name", "postgres"), ("namespace", "prod"), ("pod", "db-0"), ("pod/name", "db-0"),
    ("qosclass", "Guaranteed"), ("labels/app", "db"), ("app", "db"), ("missing", None), ("labels/missing", None),
])
def test_keys_resolve_to_the_containers_properties(key, value):
    assert resolve(W, key) == value


@pytest.mark.parametrize("expr,expected", [
    ({"key": "app", "operator": "Equals", "values": ["db"]}, True),
    ({"key": "app", "operator": "Equals", "values": ["web"]}, False),
    ({"key": "app", "operator": "NotEqual", "values": ["web"]}, True),
    ({"key": "nope", "operator": "NotEqual", "values": ["web"]}, True),
    ({"key": "nope", "operator": "Equals", "values": ["web"]}, False),
    ({"key": "tier", "operator": "In", "values": ["frontend", "backend"]}, True),
    ({"key": "tier", "operator": "NotIn", "values": ["frontend", "backend"]}, False),
    ({"key": "nope", "operator": "In", "values": ["x"]}, False),
    ({"key": "nope", "operator": "NotIn", "values": ["x"]}, True),
    ({"key": "app", "operator": "Exists"}, True),
    ({"key": "nope", "operator": "Exists"}, False),
    ({"key": "nope", "operator": "NotExist"}, True),
    ({"key": "nope", "operator": "DoesNotExist"}, True),
    ({"key": "app", "operator": "NotExist"}, False),
    ({"key": "namespace", "operator": "Matches", "values": ["pro*"]}, True),
    ({"key": "namespace", "operator": "MatchesNot", "values": ["pro*"]}, False),
    ({"key": "name", "operator": "MatchesAny", "values": ["my*", "post*"]}, True),
    ({"key": "name", "operator": "MatchesNone", "values": ["my*", "post*"]}, False),
    ({"operator": "AlwaysTrue"}, True),
])
def test_operators(expr, expected):
    assert parse(expr).evaluate(W) is expected


@pytest.mark.parametrize("expr,message", [
    ("app=db", "expected a mapping"),
    ({"key": "app"}, "operator: missing"),
    ({"key": "app", "operator": "Like", "values": ["x"]}, "unknown operator 'Like'"),
    ({"operator": "Equals", "values": ["x"]}, "key: missing"),
    ({"key": "app", "operator": "Equals", "values": ["a", "b"]}, "takes 1 value(s), got 2"),
    ({"key": "app", "operator": "In", "values": []}, "needs at least one value"),
    ({"key": "app", "operator": "Exists", "values": ["x"]}, "takes 0 value(s)"),
    ({"key": "app", "operator": "In", "values": [{"a": 1}]}, "is not a string"),
    ({"key": "app", "operator": "In", "value": ["x"]}, "unknown field 'value'"),
])
def test_bad_expressions_are_refused_naming_the_field(expr, message):
    with pytest.raises(ExpressionError, match="affinity\\[0\\]") as e:
        parse_list([expr], "affinity")
    assert message in str(e.value)


def test_a_list_holds_all_and_yaml_scalars_become_strings():
    exprs = parse_list([{"key": "app", "operator": "In", "values": ["db", 1, True]},
                        {"key": "tier", "operator": "Equals", "values": "backend"}])
    assert exprs[0].values == ("db", "1", "true")
    assert all(e.evaluate(W) for e in exprs)
    assert parse_list(None) == ()
    assert len(parse_list({"operator": "AlwaysTrue"})) == 1
    with pytest.raises(ExpressionError):
        parse_list("app in (db)")


def test_effective_annotation_lookup_prefers_container_then_pod_then_plain():
    base = "cri-resource-manager.intel.com/memory-type"
    w = Workload(key="k", namespace="n", pod="p", name="c", qos=QoS.BURSTABLE,
                 pod_annotations={base: "dram", base + "/pod": "pmem", base + "/container.other": "hbm"})
    assert w.annotation("memory-type") == "pmem"
    w2 = Workload(key="k", namespace="n", pod="p", name="c", qos=QoS.BURSTABLE,
                  pod_annotations={base: "dram", base + "/container.c": "hbm"})
    assert w2.annotation("memory-type") == "hbm"
    assert w2.annotation("cold-start") is None
    assert w2.effective_annotation("balloon.balloons.cri-resource-manager.intel.com") is None
