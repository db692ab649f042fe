"""How the policies' warnings read (issue 38): a count agrees with its noun (`1 exclusive CPU`),
and a container is named with its key shortened as every other log line shows ids (12
characters of the sandbox id), not the runtime's 64-character id."""

from __future__ import annotations

import pytest
from policy_testkit import workload as wl

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.static import StaticPolicy
from cri_resmgr.policy.static_plus import StaticPlusPolicy
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of

SANDBOX = "0123456789ab" + "c" * 52  # a sandbox id as containerd makes them: 64 characters
LONG_ID = f"{SANDBOX}:c:0"  # the engine's key of the pod's container c (engine/core.py)


@pytest.mark.parametrize("make", [StaticPolicy, StaticPlusPolicy], ids=["static", "static-plus"])
def test_a_warning_says_1_exclusive_cpu_and_the_short_id(make_topology, make):
    topo = make_topology(sockets=1, cores_per_die=2, threads_per_core=1)
    policy = make(build_context(topo, reserved="cpuset:0"))
    policy.allocate(wl("first", QoS.GUARANTEED, 1000))  # takes what there is (static), or nothing is left
    decision = policy.allocate(Workload(key=LONG_ID, namespace="default", pod="p", name="c", qos=QoS.GUARANTEED,
                                        cpu_request=1000))
    assert decision.warning is not None
    assert "wants 1 exclusive CPU but" in decision.warning, decision.warning
    assert "(0123456789ab:c:0)" in decision.warning and SANDBOX not in decision.warning, decision.warning


def test_topology_aware_says_it_for_one_cpu():
    pods = ("- name: a\n  containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]\n"
            "- name: b\n  containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]\n")
    o = simulate(pod_calls(parse_pods(pods, "p.yaml")), topology_of("1s/1n/2c/1t"), Config(PolicyConfig(reserved_cpu=1)),
                 "topology-aware", default_registry())
    assert any("wants 1 exclusive CPU but no pool can give it;" in w for w in o.warnings), o.warnings


def test_the_short_key_still_tells_a_pods_containers_apart():
    # resmgr matches a restore's warnings to containers by it: one pod's two must not share it.
    a, b = (Workload(key=f"{SANDBOX}:{n}:0", namespace="default", pod="p", name=n, qos=QoS.BESTEFFORT) for n in "ab")
    assert (a.short_key, b.short_key) == ("0123456789ab:a:0", "0123456789ab:b:0")
    assert Workload(key="g1", namespace="default", pod="p", name="c", qos=QoS.BESTEFFORT).short_key == "g1"
