"""A new balloon lands in one L3 group when one anywhere has room (issue 36): the node
choice (sizing.py's start_node) prefers a node where one L3 group holds the balloon, and
the simulator's invariant checker reports a new balloon spanning L3 groups or NUMA nodes
while one had room."""

from __future__ import annotations

import pytest
from balloons_sim import run

from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.policy.api import Decision, QoS, Resources, Workload
from cri_resmgr.policy.usage import PolicyUsage, PoolUsage
from cri_resmgr.simulate.invariants import Checker
from cri_resmgr.simulate.recording import Event
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

# 2 sockets, 4 nodes of 12 cores (24 CPUs), 3 L3 groups of 4 cores (8 CPUs) per node:
# node 0 = L3 0-7, 8-15, 16-23; node 1 = 24-31, 32-39, 40-47...
SHAPE = "2s/4n/24c/2t/l3=4"


def config(four: str = "") -> str:
    return f"""
    policy:
      Active: balloons
      ReservedResources: {{CPU: "cpuset:0-1"}}
      balloons:
        BalloonTypes:
          - {{Name: three, MinCPUs: 3, MaxCPUs: 3}}
          - {{Name: four, MaxCPUs: 4{four}}}
    """


def pods(balloon: str, count: int, cpu: str, prefix: str) -> str:
    res = f"{{requests: {{cpu: {cpu}, memory: 64Mi}}, limits: {{cpu: {cpu}, memory: 64Mi}}}}"
    return "".join(f"- {{name: {prefix}{i}, annotations: {{balloon.balloons.cri-resource-manager.intel.com: "
                   f"{balloon}}}, containers: [{{name: c, resources: {res}}}]}}\n" for i in range(count))


def l3_groups(topo: Topology, cpus: CPUSet) -> set[CPUSet]:
    return {g for g in topo.groups("l3") if g & cpus}


# Six 3-CPU balloons pack node 0 (the reserved CPUs' node: its package has the fewest free
# CPUs) two per L3 group, leaving 14-15 and 22-23: 4 CPUs of node 0, in two L3 groups.
# The 4-CPU balloon then went there (the fullest node holding it), across both, while
# node 1's L3 groups were empty.
@pytest.mark.parametrize("four", ["", ", PreferSpreadOnPhysicalCores: true", ", AllocatorTopologyBalancing: true"])
def test_a_new_balloon_goes_to_an_l3_group_with_room_not_across_two_of_the_fullest_node(four):
    topo = topology_of(SHAPE)
    _, at = run(config(four), pods("three", 6, "3", "t") + pods("four", 1, "4", "f"), SHAPE)  # (no violation)
    assert CPUSet().union(*(at[f"t{i}:c"].cpus for i in range(6))) == CPUSet("2-13,16-21")
    four_cpus = at["f0:c"].cpus
    assert len(four_cpus) == 4 and len(l3_groups(topo, four_cpus)) == 1, four_cpus
    assert {topo.node_of(c) for c in four_cpus} != {0}  # node 0 had no L3 group with room


def test_a_new_balloon_still_packs_into_the_fullest_node_whose_l3_group_holds_it():
    # four 3-CPU balloons leave 14-23 free in node 0: L3 group 16-23 holds 4 CPUs
    _, at = run(config(), pods("three", 4, "3", "t") + pods("four", 1, "4", "f"), SHAPE)
    four_cpus = at["f0:c"].cpus
    assert four_cpus <= CPUSet("16-23") and len(four_cpus) == 4, four_cpus


def test_a_new_hide_hyperthreads_balloon_takes_its_cores_in_one_l3_group():
    topo = topology_of(SHAPE)
    cfg = config(", HideHyperthreads: true").replace("MaxCPUs: 4, Hide", "MaxCPUs: 2, Hide")
    _, at = run(cfg, pods("three", 6, "3", "t") + pods("four", 1, "2", "f"), SHAPE)
    held = next(b for b in at.values() if b.balloon == "four[0]")
    owned = CPUSet().union(*(topo.siblings(c) for c in held.cpus))
    assert len(owned) == 4 and len(l3_groups(topo, owned)) == 1, owned


# -- the invariant, against a policy double that creates pools ------------------------------


class _Pools:
    """A policy double whose pools are given; it creates pools (balloons do)."""

    creates_pools = True

    def __init__(self, online: CPUSet) -> None:
        self.online = online
        self.pools: dict[str, CPUSet] = {}
        self.held: dict[str, Resources] = {}

    def usage(self) -> PolicyUsage:
        pools = tuple(PoolUsage(n, c, CPUSet(), c, kind="t") for n, c in self.pools.items())
        return PolicyUsage(pools, self.online - CPUSet().union(*self.pools.values()))

    def resources(self, key):
        return self.held.get(key)

    def assignment(self, key):
        return None

    def assignments(self):
        return {}


def _create(checker: Checker, policy: _Pools, name: str, cpus: str) -> None:
    policy.pools[name] = CPUSet(cpus)
    policy.held[name] = Resources(CPUSet(cpus), "0-3")
    w = Workload(key=name, namespace="default", pod=name, name="c", qos=QoS.BURSTABLE, cpu_request=1000)
    checker.cache.add_container(ContainerRecord(key=name, pod_id=name, name="c", workload=w))
    checker.after_call(f"create {name}", [Event("allocate", name, name, Decision(policy.held[name]), 0, None)])


def test_a_new_pool_spanning_l3_groups_while_one_had_room_is_a_violation():
    topo = topology_of(SHAPE)
    policy = _Pools(topo.online)
    policy.pools["old"] = CPUSet("2-13,16-21")  # as the six balloons above
    checker = Checker(topo, topo.online, policy, Cache(None), reserved=CPUSet("0-1"))
    _create(checker, policy, "a", "14-15,22-23")
    assert checker.violations == ["create a: new pool a: 4 CPUs 14-15,22-23 span 2 L3 groups or NUMA nodes "
                                  "while CPUs 24-31 of one had 8 CPUs free"]
    checker.violations.clear()
    _create(checker, policy, "b", "24-28")  # in one L3 group
    # across two when no L3 group had 4 CPUs free (3 in 29-31 and 2 in node 0's): none
    policy.pools["fill"] = CPUSet("32-95")
    _create(checker, policy, "fill", "32-95")
    checker.violations.clear()
    _create(checker, policy, "c", "14-15,29-30")
    assert checker.violations == [], checker.violations
    # a pool there before the call that grew across: no new pool
    policy.pools["c"] = CPUSet("14-15,29-31")
    policy.held["c"] = Resources(policy.pools["c"], "0-3")
    checker.after_call("grow c", [Event("resize", "c", "c", Decision(policy.held["c"]), 0, None)])
    assert checker.violations == []
