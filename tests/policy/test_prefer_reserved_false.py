"""`prefer-reserved-cpus: "false"` takes a container out of a reserved namespace under
every policy, through the engine's reading of the annotation (engine/classify.py, the
simulator's CreateContainer path). Before, static, static-plus and balloons kept the
annotation as "true or not": an explicit false was lost and kube-system stayed on the
reserved CPUs (topology-aware read the annotation itself and honoured it)."""

from __future__ import annotations

import textwrap

import pytest

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology.cpuset import CPUSet

PODS = """
- name: dns
  namespace: kube-system
  annotations: {cri-resource-manager.intel.com/prefer-reserved-cpus: "false"}
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
- name: per-container
  namespace: kube-system
  annotations: {cri-resource-manager.intel.com/prefer-reserved-cpus/container.c: "off"}
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
- name: proxy
  namespace: kube-system
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
- name: opted-in
  namespace: default
  annotations: {cri-resource-manager.intel.com/prefer-reserved-cpus: "true"}
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]
"""


@pytest.mark.parametrize("policy", ["static", "static-plus", "topology-aware", "balloons"])
def test_an_explicit_false_takes_kube_system_off_the_reserved_cpus(policy):
    config = Config(PolicyConfig(reserved_cpu="cpuset:0"))
    out = simulate(pod_calls(parse_pods(textwrap.dedent(PODS), "pods.yaml")), topology_of("1s/4c/2t"), config,
                   policy, default_registry())
    assert out.policy_errors == 0
    assert out.checker.count == 0, out.checker.violations
    got = {c.workload.pod: out.policy.resources(key).cpuset_cpus for key, c in out.cache.containers.items()}
    pools = {c.workload.pod: out.policy.assignment(key).pool for key, c in out.cache.containers.items()}
    reserved = CPUSet("0")
    assert got["proxy"] == reserved, "kube-system without the annotation stays on the reserved CPUs"
    assert got["opted-in"] == reserved, "an explicit true puts any namespace there"
    for pod in ("dns", "per-container"):
        # Shared CPUs (static's and topology-aware's shared pool may include the reserved
        # CPU, as kubelet's does), not the reserved pool.
        assert got[pod] != reserved and "reserved" not in pools[pod], f"{pod}: {got[pod]} ({pools[pod]})"
    assert "reserved" in pools["proxy"], pools
