"""Which CPUs a balloon takes as it inflates (issue 24, fault 8) and the allocator options
PreferSpreadOnPhysicalCores and AllocatorTopologyBalancing as nri-plugins defines them,
through `cri-resmgr simulate`."""

from __future__ import annotations

import pytest
from balloons_sim import cores, nodes, real_machine, run

from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import generate

# 2 sockets x 2 nodes x 4 cores x 2 threads, Xeon-like ids: node 0 = 0-3,16-19, node 1 =
# 4-7,20-23 (distance 11), nodes 2, 3 on the other socket (distance 21); sibling of N is N+16.
SHAPE = "2s/4n/8c/2t/interleaved"

CONFIG = """
policy:
  Active: balloons
  ReservedResources: {CPU: "cpuset:0"}
  balloons:
    BalloonTypes:
      - {Name: grow, MaxBalloons: 1}
      - {Name: one, AllocatorTopologyBalancing: true}
"""


def pods(balloon: str, count: int, cpu: str, prefix: str = "p") -> str:
    res = f"{{requests: {{cpu: {cpu}, memory: 64Mi}}, limits: {{cpu: {cpu}, memory: 64Mi}}}}"
    return "".join(f"- {{name: {prefix}{i}, annotations: {{balloon.balloons.cri-resource-manager.intel.com: "
                   f"{balloon}}}, containers: [{{name: c, resources: {res}}}]}}\n" for i in range(count))


def beside_reserved(topo: Topology, reserved: CPUSet) -> CPUSet:
    return CPUSet(c for r in reserved for c in topo.siblings(r)) - reserved


def split_cores(topo: Topology, cpus: CPUSet) -> int:
    return sum(1 for core in cores(topo, cpus) if not core <= cpus)


def test_inflating_past_a_node_takes_whole_cores_of_the_nearest_node():
    topo = topology_of(SHAPE)
    # a 1-CPU balloon where most is free (the other socket) leaves a stray thread there;
    # then one balloon grows by 3 CPUs at a time to 18, past its node and its socket
    o, at = run(CONFIG, pods("one", 1, "1", "odd") + pods("grow", 6, "3"), SHAPE)
    stray_core = next(iter(cores(topo, at["odd0:c"].cpus)))
    big = at["p0:c"].cpus
    assert len(big) == 18 and all(at[f"p{i}:c"].cpus == big for i in range(6))
    assert not big & beside_reserved(topo, CPUSet("0")), big  # CPU 16 shares reserved CPU 0's core
    assert not big & stray_core, big  # the other socket's stray thread
    assert split_cores(topo, big) == 0  # 18 CPUs: 9 whole cores
    # its nodes: its own (0) and the nearest (1) full, then one node of the other socket
    assert nodes(topo, big) >= {0, 1} and len(nodes(topo, big)) == 3
    # and at every step it grew near: node 1 before the other socket
    steps = [e for s in o.steps for e in s.events if e.container.startswith("default/p")]
    assert [len(nodes(topo, e.decision.resources.cpuset_cpus)) for e in steps] == [1, 1, 2, 2, 3, 3]


def test_threads_beside_reserved_cpus_are_the_last_taken():
    topo = topology_of(SHAPE)
    _, at = run(CONFIG, pods("grow", 10, "3"), SHAPE)  # 30 of the 31 unreserved CPUs
    assert 16 not in at["p0:c"].cpus and len(at["p0:c"].cpus) == 30
    _, at = run(CONFIG, pods("grow", 10, "3") + pods("grow", 1, "1", "q"), SHAPE)
    assert 16 in at["p0:c"].cpus  # nothing else left
    assert split_cores(topo, CPUSet(range(1, 32)) - CPUSet("16")) == 0


def test_inflating_on_a_real_two_socket_machine(tmp_path_factory):
    topo = real_machine(tmp_path_factory, "xeon-2socket-4numa-80cpu.tar.bz2", "sysfs/2-socket-4-node-40-core")
    cfg = CONFIG.replace('"cpuset:0"', '"cpuset:0,40"')
    # a stray thread on the other socket, then a 32-CPU balloon grown 4 CPUs at a time
    o, at = run(cfg, pods("one", 1, "1", "odd") + pods("grow", 8, "4"), topo)
    big = at["p0:c"].cpus
    stray = next(iter(cores(topo, at["odd0:c"].cpus)))
    assert len(big) == 32 and not big & stray and split_cores(topo, big) == 0
    assert {topo.package_of(c) for c in big} == {0}  # 38 CPUs of package 0 were free: it stays there
    node_of_start = topo.node_of(min(at["p0:c"].cpus & topo.node_cpus(0))) if big & topo.node_cpus(0) else None
    assert node_of_start == 0  # packed: beside the reserved CPUs' node, not on their core


SPREAD = """
policy:
  Active: balloons
  ReservedResources: {CPU: 1}
  balloons:
    AllocatorTopologyBalancing: true
    PreferSpreadOnPhysicalCores: true
    BalloonTypes:
      - {Name: policydefaults, MinCPUs: 2, MinBalloons: 2}
      - {Name: topo1cores0, MinCPUs: 2, MinBalloons: 2, PreferSpreadOnPhysicalCores: false}
      - {Name: topo0cores1, AllocatorTopologyBalancing: false, PreferSpreadOnPhysicalCores: true}
      - {Name: topo0cores0, AllocatorTopologyBalancing: false, PreferSpreadOnPhysicalCores: false}
      - {Name: topo1cores1, AllocatorTopologyBalancing: true, PreferSpreadOnPhysicalCores: true}
"""


def test_prefer_spread_on_physical_cores_and_its_override_per_type():
    shape = "1s/4n/8c/2t"  # 4 nodes of 2 cores (4 CPUs)
    topo = topology_of(shape)
    text = pods("policydefaults", 1, "100m", "a") + pods("topo1cores0", 1, "100m", "b") + \
        pods("topo1cores1", 1, "2", "c").replace("[{name: c,", "[{name: c0,") + \
        pods("topo0cores0", 1, "2", "d")
    _, at = run(SPREAD, text, shape)
    a, b = at["a0:c"].cpus, at["b0:c"].cpus
    assert len(a) == 2 and len(cores(topo, a)) == 2  # spread: two cores, one thread each
    assert len(b) == 2 and len(cores(topo, b)) == 1  # packed on one core
    assert len(cores(topo, at["c0:c0"].cpus)) == 2 and len(cores(topo, at["d0:c"].cpus)) == 1


def test_a_spread_balloon_takes_the_other_threads_only_when_its_node_has_no_new_core():
    cfg = """
    policy:
      Active: balloons
      ReservedResources: {CPU: "cpuset:0"}
      balloons:
        BalloonTypes:
          - {Name: spread, PreferSpreadOnPhysicalCores: true}
          - {Name: packed}
    """
    topo = topology_of("1s/4c/2t")  # cores 0/1, 2/3, 4/5, 6/7
    _, at = run(cfg, pods("spread", 3, "1") + pods("packed", 3, "1", "q"), "1s/4c/2t")
    assert at["p0:c"].cpus.__len__() == 3 and len(cores(topo, at["p0:c"].cpus)) == 3
    _, at = run(cfg, pods("packed", 3, "1"), "1s/4c/2t")
    assert len(cores(topo, at["p0:c"].cpus)) == 2
    topo = topology_of("1s/2n/4c/2t")  # node 0: cores 0/1 (reserved 0), 2/3; node 1: 4/5, 6/7
    _, at = run(cfg, pods("spread", 3, "1"), "1s/2n/4c/2t")
    # one thread of core 2/3, then (no new core in node 0 but the reserved one) its other
    # thread, then node 1: the node before the spreading
    assert at["p0:c"].cpus == CPUSet("2-4")


@pytest.mark.parametrize("balance, expected_nodes", [(True, 4), (False, 2)])
def test_allocator_topology_balancing_spreads_new_balloons_or_packs_them(balance, expected_nodes):
    shape = "1s/4n/8c/2t"
    topo = topology_of(shape)
    cfg = f"""
    policy:
      Active: balloons
      ReservedResources: {{CPU: 1}}
      balloons:
        AllocatorTopologyBalancing: {str(balance).lower()}
        BalloonTypes:
          - {{Name: dyn, PreferNewBalloons: true, MaxBalloons: 8}}
    """
    _, at = run(cfg, pods("dyn", 4, "1"), shape)
    placed = [at[f"p{i}:c"].cpus for i in range(4)]
    assert len({at[f"p{i}:c"].balloon for i in range(4)}) == 4
    assert len(set().union(*(nodes(topo, c) for c in placed))) == expected_nodes
    if not balance:  # packed: the reserved CPU's node first, on its free core, not beside the reserved CPU
        assert nodes(topo, placed[0]) == {0} and not placed[0] & beside_reserved(topo, CPUSet("0"))


def test_the_kernels_isolated_cpus_are_the_last_a_balloon_takes(tmp_path):
    generate(tmp_path, sockets=1, cores_per_die=4, threads_per_core=2, isolated=[2, 3])  # core 2/3
    topo = discover(tmp_path)
    assert topo.isolated == CPUSet("2-3")
    # CPU 0 reserved: 1 shares its core, 2-3 are isolated; 4-7 are taken first
    _, at = run(CONFIG, pods("grow", 4, "1"), topo)
    assert at["p0:c"].cpus == CPUSet("4-7")
    _, at = run(CONFIG, pods("grow", 7, "1"), topo)  # all of them: the isolated ones too
    assert at["p0:c"].cpus == CPUSet("1-7")
