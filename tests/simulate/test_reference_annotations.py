"""What pods written for CRI Resource Manager carry, understood the same here (issue 24,
"missing"): the `NAME.cri-resource-manager.intel.com/pod` and `.../container.C` keys beside
ours, cold-start given as `duration: 10s`, and a Guaranteed container's memory request
taken from its limit when no webhook annotation is there. Through `cri-resmgr simulate`."""

from __future__ import annotations

import textwrap

import pytest

from cri_resmgr.config import parse_document
from cri_resmgr.engine.classify import parse_bool_for
from cri_resmgr.policy.api import QoS, annotation_keys
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.engine import Outcome, simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of


def run(policy: str, pods: str, shape: str, extra: str = "") -> Outcome:
    registry = default_registry()
    cfg = parse_document(f"policy:\n  Active: {policy}\n  ReservedResources: {{CPU: 1}}\n{extra}", "c.yaml",
                         registry.names())
    o = simulate(pod_calls(parse_pods(textwrap.dedent(pods), "pods.yaml")), topology_of(shape), cfg, policy,
                 registry)
    assert o.policy_errors == 0 and o.checker.count == 0, (o.messages, o.checker.violations)
    return o


def placed(o: Outcome) -> dict[str, tuple[str, str, str | None]]:
    """pod:container -> (pool, cpus, mems)"""
    out = {}
    for c in o.cache:
        r, a = o.policy.resources(c.key), o.policy.assignment(c.key)
        assert r is not None and a is not None
        out[f"{c.workload.pod}:{c.workload.name}"] = (a.pool, str(r.cpuset_cpus), r.cpuset_mems)
    return out


def workloads(o: Outcome) -> dict[str, object]:
    return {f"{c.workload.pod}:{c.workload.name}": c.workload for c in o.cache}


GUARANTEED = "{requests: {cpu: 2, memory: 1Gi}, limits: {cpu: 2, memory: 1Gi}}"


def test_key_forms_are_looked_up_container_first_in_both_forms():
    keys = annotation_keys("cri-resource-manager.intel.com/memory-type", "db")
    assert keys[:2] == ("cri-resource-manager.intel.com/memory-type/container.db",
                        "memory-type.cri-resource-manager.intel.com/container.db")
    assert keys[2:4] == ("resource-policy.nri.io/memory-type/container.db",
                         "memory-type.resource-policy.nri.io/container.db")
    assert keys[4:6] == ("cri-resource-manager.intel.com/memory-type/pod", "memory-type.cri-resource-manager.intel.com/pod")
    assert keys[-1] == "memory-type.resource-policy.nri.io" and len(keys) == 12
    assert annotation_keys("balloon.balloons.cri-resource-manager.intel.com", "c")[0] == \
        "balloon.balloons.cri-resource-manager.intel.com/container.c"


def test_prefer_shared_in_the_reference_form_per_container_and_per_pod():
    pods = f"""
    - name: a
      annotations:
        prefer-shared-cpus.cri-resource-manager.intel.com/container.c0: "true"
      containers: [{{name: c0, resources: {GUARANTEED}}}, {{name: c1, resources: {GUARANTEED}}}]
    - name: b
      annotations: {{prefer-shared-cpus.cri-resource-manager.intel.com/pod: "true"}}
      containers: [{{name: c0, resources: {GUARANTEED}}}]
    """
    o = run("static", pods, "1s/8c")
    at = placed(o)
    assert at["a:c0"][0] == "shared" and at["b:c0"][0] == "shared"
    assert at["a:c1"][0] == "exclusive"
    w = workloads(o)
    assert w["a:c0"].prefer_shared is True and w["a:c1"].prefer_shared is None


def test_the_per_container_object_form_of_a_boolean():
    assert parse_bool_for('{"c1": true, "c2": false}', "c1") is True
    assert parse_bool_for('{"c1": true, "c2": false}', "c2") is False
    assert parse_bool_for('{"c1": true}', "c3") is None
    assert parse_bool_for('{"c1": -1}', "c1") is True and parse_bool_for("{c1: 0}", "c1") is True
    with pytest.raises(ValueError):
        parse_bool_for("{c1: maybe}", "c1")
    with pytest.raises(ValueError):
        parse_bool_for("{not yaml", "c1")


def test_nri_plugins_annotation_domain():
    extra = ("  balloons:\n    BalloonTypes:\n      - {Name: fast, MinCPUs: 1}\n      - {Name: slow, MinCPUs: 1}\n")
    pods = """
    - name: p
      annotations:
        balloon.balloons.resource-policy.nri.io/pod: slow
        balloon.balloons.resource-policy.nri.io/container.c1: fast
      containers: [{name: c0}, {name: c1}]
    """
    at = placed(run("balloons", pods, "1s/4c/2t", extra))
    assert at["p:c0"][0] == "slow[0]" and at["p:c1"][0] == "fast[0]"


def test_balloon_type_per_container_in_the_reference_form():
    extra = ("  balloons:\n    BalloonTypes:\n      - {Name: fast, MinCPUs: 1}\n      - {Name: slow, MinCPUs: 1}\n")
    pods = """
    - name: p
      annotations:
        balloon.balloons.cri-resource-manager.intel.com/pod: slow
        balloon.balloons.cri-resource-manager.intel.com/container.c1: fast
      containers: [{name: c0}, {name: c1}]
    """
    at = placed(run("balloons", pods, "1s/4c/2t", extra))
    assert at["p:c0"][0] == "slow[0]" and at["p:c1"][0] == "fast[0]"


def test_memory_type_and_cold_start_in_the_reference_forms():
    pods = f"""
    - name: cold
      annotations:
        memory-type.cri-resource-manager.intel.com/container.c0: dram,pmem
        cold-start.cri-resource-manager.intel.com/container.c0: |
          duration: 10s
      containers: [{{name: c0, resources: {GUARANTEED}}}]
    - name: plain
      annotations: {{memory-type.cri-resource-manager.intel.com/pod: pmem}}
      containers: [{{name: c0, resources: {GUARANTEED}}}]
    """
    o = run("topology-aware", pods, "2s/8c/2pmem")
    msgs = " ".join(o.messages + [w for s in o.steps for e in s.events for w in [e.decision.warning or ""]])
    assert "ignoring annotation" not in msgs
    at = placed(o)
    topo = topology_of("2s/8c/2pmem")
    pmem = {n for n in topo.memory_only_node_ids()}
    cold_mems = {int(n) for n in at["cold:c0"][2].split(",")}
    assert cold_mems and cold_mems <= pmem  # starts cold: PMEM only, until 10 s are over
    plain_mems = {int(n) for n in at["plain:c0"][2].split(",")}
    assert plain_mems <= pmem


def test_guaranteed_memory_request_from_the_limit_without_the_webhook():
    # 4 NUMA nodes of 1 GiB: a Guaranteed container limited to 3 GiB does not fit one node's
    # memory; without the webhook the CRI request carries only its limit.
    pods = """
    - name: big
      containers: [{name: c, resources: {requests: {cpu: 1, memory: 3Gi}, limits: {cpu: 1, memory: 3Gi}}}]
    - name: burst
      containers: [{name: c, resources: {requests: {cpu: 1}, limits: {cpu: 2, memory: 3Gi}}}]
    """
    o = run("topology-aware", pods, "1s/4n/8c/mem=1g")
    w = workloads(o)
    assert w["big:c"].qos is QoS.GUARANTEED and w["big:c"].memory_request == 3 << 30
    assert w["burst:c"].qos is QoS.BURSTABLE and w["burst:c"].memory_request == 0  # no request known
    mems = placed(o)["big:c"][2]
    assert len(mems.replace("-", ",").split(",")) > 1 or "-" in mems  # widened beyond one node
