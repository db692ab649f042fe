"""What users of CRI Resource Manager and nri-plugins expect of topology-aware (issue 24),
through `cri-resmgr simulate`: pods in, cpusets and mems out, on generated machines.

Each test names what the policy did before the fix."""

from __future__ import annotations

import textwrap
from collections import Counter

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.api import Resources
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.engine import Outcome, simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine

TA = "topology-aware"


def run(pods: str, machine_: str | Topology, reserved: object = None, **options: object) -> Outcome:
    topo = topology_of(machine_) if isinstance(machine_, str) else machine_
    config = Config(PolicyConfig(reserved_cpu=reserved, sections={TA: options} if options else {}))
    out = simulate(pod_calls(parse_pods(textwrap.dedent(pods), "pods.yaml")), topo, config, TA, default_registry())
    assert out.checker.count == 0, out.checker.violations
    assert out.policy_errors == 0
    return out


def placed(out: Outcome) -> dict[str, Resources]:
    """pod:container -> the resources the policy holds for it."""
    res = {}
    for key, c in out.cache.containers.items():
        r = out.policy.resources(key)
        if r is not None and not c.released:
            res[f"{c.workload.pod}:{c.workload.name}"] = r
    return res


def nodes_of(topo: Topology, cpus: CPUSet) -> set[int]:
    return {topo.node_of(c) for c in cpus}


def test_besteffort_containers_spread_over_the_nodes():
    # Before: all four on node 0 (which also holds the reserved CPU): every tie went to node 0.
    out = run("""
        - name: be
          containers: [{name: c1}, {name: c2}, {name: c3}, {name: c4}]
    """, "2s/4n/4c/2t", reserved="750m")
    got = placed(out)
    assert len({out.topology.node_of(r.cpuset_cpus.min()) for r in got.values()}) == 4, got
    assert all(r.cpuset_mems == str(out.topology.node_of(r.cpuset_cpus.min())) for r in got.values())


def test_many_besteffort_and_1m_pods_are_balanced():
    # Before: nine BestEffort pods all got node 0.
    pods = "\n".join(f"- name: be{i}\n  containers: [{{name: c}}]" for i in range(9))
    pods += "\n" + "\n".join(
        f"- name: tiny{i}\n  containers: [{{name: c, resources: {{limits: {{cpu: 1m, memory: 10M}}}}}}]"
        for i in range(4))
    out = run(pods, "2s/4n/16c/2t")
    topo = out.topology
    per_node = Counter(topo.node_of(r.cpuset_cpus.min()) for k, r in placed(out).items() if k.startswith("be"))
    assert max(per_node.values()) - min(per_node.values()) <= 1 and len(per_node) == 4, per_node
    tiny = Counter(topo.node_of(r.cpuset_cpus.min()) for k, r in placed(out).items() if k.startswith("tiny"))
    assert len(tiny) == 4, tiny


def test_exclusive_plus_fraction_fits_on_the_last_cpu():
    # Before: "wants 2 exclusive CPUs but no pool can give them": 500m and 400m were each
    # rounded up to a CPU of their own.
    out = run("""
        - name: a
          containers: [{name: c, resources: {limits: {cpu: 1500m, memory: 100M}}}]
        - name: b
          annotations: {cri-resource-manager.intel.com/prefer-shared-cpus: "false"}
          containers: [{name: c, resources: {limits: {cpu: 2400m, memory: 100M}}}]
    """, "1s/2c/2t")
    assert out.warnings == []
    a, b = out.policy.assignments().values()
    assert len(a.exclusive) == 1 and len(b.exclusive) == 2 and a.exclusive.isdisjoint(b.exclusive)
    shared = CPUSet("0-3") - a.exclusive - b.exclusive
    assert len(shared) == 1 and placed(out)["b:c"].cpuset_cpus == b.exclusive | shared


def test_prefer_reserved_false_takes_a_pod_out_of_kube_system():
    # Before: kube-system stayed on the reserved CPUs whatever the annotation said.
    out = run("""
        - name: dns
          namespace: kube-system
          annotations: {cri-resource-manager.intel.com/prefer-reserved-cpus: "false"}
          containers: [{name: c, resources: {requests: {cpu: 100m}}}]
        - name: proxy
          namespace: kube-system
          containers: [{name: c, resources: {requests: {cpu: 100m}}}]
    """, "1s/2n/4c/2t", reserved="cpuset:0")
    got = placed(out)
    assert got["proxy:c"].cpuset_cpus == CPUSet("0")
    assert out.policy.assignment(next(k for k, c in out.cache.containers.items() if c.workload.pod == "dns")).pool \
        != "reserved"
    assert got["dns:c"].cpuset_cpus != CPUSet("0")


def test_kube_system_container_bigger_than_the_reserved_cpus_runs_shared():
    # Before: a 2-CPU Guaranteed kube-system pod ran on reserved CPU 0, overcommitted, silently.
    out = run("""
        - name: big
          namespace: kube-system
          containers: [{name: c, resources: {limits: {cpu: 2, memory: 100M}}}]
    """, "1s/4c/2t", reserved="cpuset:0")
    cpus = placed(out)["big:c"].cpuset_cpus
    assert len(cpus) >= 2 and cpus != CPUSet("0")
    assert any("kube-system/big:c" in w and "reserved" in w for w in out.warnings), out.warnings


def test_nodes_holding_several_packages_are_pools_and_pin_memory():
    # 16 packages of 12 CPUs, 4 NUMA nodes of 4 packages each. Before: the tree was root and
    # packages, so a 24-CPU container landed in the root with every node's memory (mems 0-3).
    topo = machine(packages=16, cores=6, threads=2, node_of_package=lambda p: p // 4)
    out = run("""
        - name: big
          containers: [{name: c, resources: {limits: {cpu: 24, memory: 1G}}}]
        - name: wide
          containers: [{name: c, resources: {requests: {cpu: 20}, limits: {cpu: 20, memory: 1G}}}]
    """, topo)
    for key in ("big:c", "wide:c"):
        r = placed(out)[key]
        nodes = nodes_of(topo, r.cpuset_cpus)
        assert len(nodes) == 1 and r.cpuset_mems == str(min(nodes)), (key, r)
    pools = {a.pool for a in out.policy.assignments().values()}
    assert pools <= {f"node{n}" for n in range(4)}, pools


def test_exclusive_cpus_keep_whole_cores_when_shared_ones_are_kept():
    # 8 cores x 2 threads, siblings N and N+8; a Burstable pod asks 8 CPUs. Before: the shared
    # CPUs kept were the 8 highest ids (one thread of every core), so the 8 exclusive CPUs
    # split all 8 cores while 4 cores could have been whole.
    out = run("""
        - name: burst
          containers: [{name: c, resources: {requests: {cpu: 8}, limits: {cpu: 12}}}]
        - name: g
          containers: [{name: c, resources: {limits: {cpu: 8, memory: 100M}}}]
    """, "1s/8c/2t/interleaved")
    exclusive = next(a.exclusive for a in out.policy.assignments().values() if a.exclusive)
    assert len(exclusive) == 8
    for cpu in exclusive:
        assert out.topology.siblings(cpu) <= exclusive, f"core of CPU {cpu} split: {exclusive}"


def test_short_affinity_form_names_containers_of_the_pod():
    # `C: [ OTHER ]`, as in the references. Before: "expected a list of {scope, match, weight}".
    out = run("""
        - name: p
          annotations:
            cri-resource-manager.intel.com/affinity: |
              b: [ a ]
            cri-resource-manager.intel.com/anti-affinity: |
              c: [ a, b ]
          containers:
          - {name: a, resources: {requests: {cpu: 500m}}}
          - {name: b, resources: {requests: {cpu: 500m}}}
          - {name: c, resources: {requests: {cpu: 500m}}}
    """, "2s/4n/4c/2t")
    assert out.messages == [] and out.warnings == []
    pools = {k: a.pool for k, a in out.policy.assignments().items()}
    by_name = {out.cache.containers[k].workload.name: p for k, p in pools.items()}
    assert by_name["b"] == by_name["a"]
    assert by_name["c"] != by_name["a"]


def test_burstable_with_a_cpu_limit_goes_where_the_limit_is_free():
    # nri-plugins: a limited Burstable container goes to the lowest pool with its limit free;
    # 4-CPU nodes, limit 5: a package, one each. Before: a node (only the request counted).
    out = run("""
        - name: p
          containers:
          - {name: c0, resources: {requests: {cpu: 2, memory: 100M}, limits: {cpu: 5, memory: 1G}}}
          - {name: c1, resources: {requests: {cpu: 2, memory: 100M}, limits: {cpu: 5, memory: 1G}}}
    """, "2s/4n/8c/1t")
    got = placed(out)
    assert {out.policy.assignments()[k].pool for k in out.policy.assignments()} == {"package0", "package1"}
    assert len(nodes_of(out.topology, got["p:c0"].cpuset_cpus)) == 2


def test_burstable_memory_by_limit_and_unlimited_burstable_level():
    # nri-plugins test14: memory nodes hold the memory limit; no memory limit: every node;
    # no CPU limit: no lower than UnlimitedBurstable (package by default). 1 GiB per node.
    pods = """
        - name: small
          containers: [{name: c, resources: {requests: {cpu: 1, memory: 100M}, limits: {cpu: 2, memory: 1500M}}}]
        - name: nolimit
          containers: [{name: c, resources: {requests: {cpu: 1, memory: 100M}, limits: {cpu: 2}}}]
        - name: unlimited
          containers: [{name: c, resources: {requests: {cpu: 1, memory: 100M}, limits: {memory: 500M}}}]
    """
    out = run(pods, "2s/4n/8c/1t/mem=1g")
    got = placed(out)
    assert len(CPUSet.parse(got["small:c"].cpuset_mems)) == 2, got["small:c"]
    assert got["nolimit:c"].cpuset_mems == "0-3"
    assert out.policy.assignments()[next(k for k, c in out.cache.containers.items()
                                         if c.workload.pod == "unlimited")].pool.startswith("package")
    # The policy-wide level: system puts it in the root, and an annotation overrides it.
    out = run(pods, "2s/4n/8c/1t/mem=1g", UnlimitedBurstable="system")
    assert placed(out)["unlimited:c"].cpuset_cpus == CPUSet("0-15")
    annotated = pods.replace("- name: unlimited", "- name: unlimited\n"
                             "          annotations: {cri-resource-manager.intel.com/unlimited-burstable: numa}")
    out = run(annotated, "2s/4n/8c/1t/mem=1g", UnlimitedBurstable="system")
    assert len(nodes_of(out.topology, placed(out)["unlimited:c"].cpuset_cpus)) == 1


def test_memory_type_mixed_is_every_kind():
    # nri-plugins' "mixed". Before: "unknown memory type 'mixed'".
    from cri_resmgr.policy.topology_aware.memory import parse_memory_type
    assert parse_memory_type("mixed") == ("dram", "pmem", "hbm")
    assert parse_memory_type("hbm,mixed") == ("dram", "pmem", "hbm")


def test_the_issue_command_line(tmp_path, capsys):
    # Fault 1 exactly as the issue runs it: cri-resmgr simulate -shape 2s/4n/4c/2t with 750m
    # reserved; the JSON report's decisions name four different node pools.
    import json

    import pytest

    from cri_resmgr import cli
    (tmp_path / "config.yaml").write_text("policy:\n  Active: topology-aware\n  ReservedResources: {CPU: 750m}\n")
    (tmp_path / "pods.yaml").write_text("- name: be\n  containers: [{name: c1}, {name: c2}, {name: c3}, {name: c4}]\n")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "-shape", "2s/4n/4c/2t", "-force-config", str(tmp_path / "config.yaml"),
                  "-pods", str(tmp_path / "pods.yaml"), "-o", "json"])
    assert exit_.value.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    pools = [d["pool"] for step in doc["steps"] for d in step["decisions"]]
    assert sorted(pools) == ["node0", "node1", "node2", "node3"], pools
