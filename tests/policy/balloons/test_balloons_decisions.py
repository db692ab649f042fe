"""Decisions of the balloons policy on generated topologies, no I/O."""

from __future__ import annotations

import pytest
from balloons_testkit import annotated, by_name, hybrid, policy, wl

from cri_resmgr.policy.api import PolicyError
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine

DP = {"Name": "dataplane", "Namespaces": ["dpdk"], "MinCPUs": 2, "MaxCPUs": 4, "MinBalloons": 1,
      "MaxBalloons": 2}
BATCH = {"Name": "batch", "Namespaces": ["batch*"], "MaxBalloons": 2}


@pytest.fixture
def two_nodes():
    # 2 packages x 4 cores x 2 threads, linear: package 0 = 0-7, package 1 = 8-15.
    return machine(packages=2, cores=4, threads=2)


# -- matching ------------------------------------------------------------------------------


def test_matching_order_annotation_reserved_namespace_expression_default(two_nodes):
    p = policy(two_nodes, [DP, BATCH, {"Name": "upf", "MatchExpressions": [
        {"key": "app", "operator": "In", "values": ["upf"]}]}])
    cases = {
        "sys": wl("sys", namespace="kube-system"),
        "flag": wl("flag", system=True, namespace="x"),
        "dp": wl("dp", 1000, "dpdk"),
        "glob": wl("glob", 500, "batch-7"),
        "expr": wl("expr", 500, "web", labels={"app": "upf"}),
        "dflt": wl("dflt", 100, "web"),
        # The annotation wins over the namespace; a container key wins over the pod's.
        "ann": annotated("ann", "batch", 500, "dpdk"),
        "ctr": wl("ctr", 0, "dpdk", pod_annotations={
            "balloon.balloons.cri-resource-manager.intel.com": "batch",
            "balloon.balloons.cri-resource-manager.intel.com/container.ctr": "default"}),
    }
    want = {"sys": "reserved", "flag": "reserved", "dp": "dataplane", "glob": "batch", "expr": "upf",
            "dflt": "default", "ann": "batch", "ctr": "default"}
    for key, w in cases.items():
        d = p.allocate(w)
        assert d.warning is None
        assert p.balloon_of(key).type.name == want[key], key
        assert p.assignment(key).pool == p.balloon_of(key).name


def test_unknown_annotated_type_warns_and_falls_back_to_namespace(two_nodes):
    p = policy(two_nodes, [DP])
    d = p.allocate(annotated("a", "nosuch", 1000, "dpdk"))
    assert "no balloon type 'nosuch'" in d.warning and "(a)" in d.warning
    assert p.balloon_of("a").type.name == "dataplane"


def test_reserved_containers_run_on_the_reserved_cpus(two_nodes):
    p = policy(two_nodes, [], reserved="cpuset:0-1", ReservedPoolNamespaces=["kube-system", "mon*"])
    d = p.allocate(wl("m", 3000, "monitoring"))
    assert d.resources.cpuset_cpus == CPUSet("0-1")
    assert by_name(p)["reserved[0]"].cpus == CPUSet("0-1")  # never resized


def test_known_key_is_refused(two_nodes):
    p = policy(two_nodes, [])
    p.allocate(wl("a"))
    with pytest.raises(PolicyError, match="already placed"):
        p.allocate(wl("a"))
    assert p.release("nobody").others == {} and p.release("nobody").resources is None


# -- sizing ----------------------------------------------------------------------------------


def test_min_balloons_exist_at_start_with_min_cpus(two_nodes):
    p = policy(two_nodes, [DP, {"Name": "x", "MinBalloons": 3, "MinCPUs": 1}])
    names = by_name(p)
    assert {"reserved[0]", "dataplane[0]", "x[0]", "x[1]", "x[2]", "default[0]"} == set(names)
    assert len(names["dataplane[0]"].cpus) == 2 and len(names["x[2]"].cpus) == 1
    assert len(names["default[0]"].cpus) == 0  # MinCPUs 0 unless configured


def test_balloon_size_is_requests_rounded_up_within_bounds(two_nodes):
    p = policy(two_nodes, [DP])
    b = by_name(p)["dataplane[0]"]
    p.allocate(wl("a", 100, "dpdk"))
    assert len(b.cpus) == 2  # MinCPUs
    p.allocate(wl("b", 2500, "dpdk", pod="pod-a"))
    assert len(b.cpus) == 3  # 2.6 CPUs rounded up
    # 4 (MaxCPUs) would be exceeded: a second balloon (MaxBalloons 2) takes it.
    p.allocate(wl("c", 1500, "dpdk"))
    assert p.balloon_of("c").name == "dataplane[1]" and len(p.balloon_of("c").cpus) == 2
    p.release("b")
    assert len(b.cpus) == 2  # deflated back to MinCPUs


def test_max_balloons_then_best_effort_with_a_warning(two_nodes):
    p = policy(two_nodes, [DP])
    for i in range(2):
        assert p.allocate(wl(f"f{i}", 4000, "dpdk")).warning is None
    d = p.allocate(wl("over", 1000, "dpdk"))
    assert d.warning and "no dataplane balloon can hold" in d.warning and "(over)" in d.warning
    b = p.balloon_of("over")
    assert b.type.name == "dataplane" and len(b.cpus) == 4  # never above MaxCPUs
    assert d.resources.cpuset_cpus == b.cpus


def test_empty_balloons_above_min_balloons_are_removed(two_nodes):
    p = policy(two_nodes, [DP])
    p.allocate(wl("a", 4000, "dpdk"))
    p.allocate(wl("b", 2000, "dpdk"))
    assert "dataplane[1]" in by_name(p)
    free_before = p.free
    p.release("b")
    assert "dataplane[1]" not in by_name(p) and len(p.free) == len(free_before) + 2
    p.release("a")
    assert len(by_name(p)["dataplane[0]"].cpus) == 2  # the MinBalloons one stays, at MinCPUs


def test_resize_updates_every_member(two_nodes):
    p = policy(two_nodes, [BATCH])
    p.allocate(wl("a", 1000, "batch"))
    p.allocate(wl("b", 500, "batch", pod="pod-a"))
    d = p.allocate(wl("c", 1000, "batch", pod="pod-a"))
    cpus = p.balloon_of("c").cpus
    assert len(cpus) == 3 and set(d.others) == {"a", "b"}
    assert all(r.cpuset_cpus == cpus for r in d.others.values())
    d = p.release("a")
    assert set(d.others) == {"b", "c"} and len(d.others["b"].cpus if False else d.others["b"].cpuset_cpus) == 2


def test_no_free_cpus_for_a_new_type_balloon_goes_to_default(two_nodes):
    p = policy(two_nodes, [{"Name": "big", "Namespaces": ["big"], "MaxCPUs": 15}, BATCH])
    p.allocate(wl("hog", 15000, "big"))
    assert not p.free
    d = p.allocate(wl("late", 1000, "batch"))
    # Best-effort: the default balloon, which has no CPU either: the reserved one meanwhile.
    assert d.warning and p.balloon_of("late").name == "default[0]"
    assert d.resources.cpuset_cpus == CPUSet("0")
    d = p.release("hog")  # CPUs free up: the short balloon takes what it needs
    assert len(p.balloon_of("late").cpus) == 1 and d.others["late"].cpuset_cpus == p.balloon_of("late").cpus


# -- choosing among balloons ------------------------------------------------------------------


def test_packing_pods_vs_spreading_pods(two_nodes):
    t = {"Name": "w", "Namespaces": ["w"], "MinBalloons": 2, "MinCPUs": 1, "MaxCPUs": 4}
    pack = policy(two_nodes, [t])
    spread = policy(two_nodes, [dict(t, PreferSpreadingPods=True)])
    for p in (pack, spread):
        p.allocate(wl("a1", 500, "w", pod="A"))
        p.allocate(wl("a2", 500, "w", pod="A"))
    assert pack.balloon_of("a1") is pack.balloon_of("a2")
    assert spread.balloon_of("a1") is not spread.balloon_of("a2")


def test_prefer_new_balloons(two_nodes):
    p = policy(two_nodes, [dict(BATCH, PreferNewBalloons=True, MaxBalloons=3)])
    for i in range(4):
        p.allocate(wl(f"c{i}", 500, "batch"))
    assert [p.balloon_of(f"c{i}").name for i in range(4)][:3] == ["batch[0]", "batch[1]", "batch[2]"]
    assert p.balloon_of("c3").type.name == "batch"  # MaxBalloons reached: an existing one


def test_prefer_per_namespace_balloon(two_nodes):
    p = policy(two_nodes, [dict(BATCH, PreferPerNamespaceBalloon=True, MaxBalloons=3)])
    p.allocate(wl("a", 500, "batch-a"))
    p.allocate(wl("b", 500, "batch-b"))
    p.allocate(wl("a2", 500, "batch-a"))
    assert p.balloon_of("a") is p.balloon_of("a2") and p.balloon_of("b") is not p.balloon_of("a")


# -- locality ---------------------------------------------------------------------------------


def test_inflating_stays_near_and_deflating_keeps_compact():
    # 2 packages, each 2 dies of 4 cores, L3 per 2 cores (CCX): die = 8 CPUs, L3 = 4.
    topo = machine(packages=2, dies=2, cores=4, l3_cores=2, threads=2)
    p = policy(topo, [{"Name": "b", "Namespaces": ["b"], "MaxBalloons": 1}], reserved="cpuset:0-1")
    p.allocate(wl("a", 1000, "b"))
    first = p.balloon_of("a").cpus
    p.allocate(wl("x0", 1000, "b"))
    # The same core when its other thread is free (here the default balloon has it), the same L3.
    cpus = p.balloon_of("a").cpus
    assert first.issubset(cpus) and len({topo.cpu(c).l3 for c in cpus}) == 1, cpus
    for i in range(1, 3):
        p.allocate(wl(f"x{i}", 1000, "b"))
    cpus = p.balloon_of("a").cpus
    assert first.issubset(cpus) and len(cpus) == 4
    assert len({topo.cpu(c).die for c in cpus}) == 1, cpus
    for i in range(3, 7):
        p.allocate(wl(f"x{i}", 1000, "b"))
    cpus = p.balloon_of("a").cpus
    assert len(cpus) == 8 and len({topo.cpu(c).package for c in cpus}) == 1, cpus
    assert len({topo.cpu(c).die for c in cpus}) <= 2
    for i in range(3, 7):
        p.release(f"x{i}")
    cpus = p.balloon_of("a").cpus
    assert len(cpus) == 4 and len({topo.cpu(c).die for c in cpus}) == 1, cpus
    assert len({topo.cpu(c).l3 for c in cpus}) <= 2


def test_hide_hyperthreads_owns_whole_cores_and_shows_one_thread(two_nodes):
    p = policy(two_nodes, [dict(DP, HideHyperthreads=True, MaxCPUs=3)], reserved="cpuset:0")
    d = p.allocate(wl("a", 3000, "dpdk"))
    b = p.balloon_of("a")
    assert len(b.cpus) == 6 and all(two_nodes.siblings(c).issubset(b.cpus) for c in b.cpus)
    seen = d.resources.cpuset_cpus
    assert len(seen) == 3 and all(len(two_nodes.siblings(c) & seen) == 1 for c in seen)


def test_allocator_priority_on_hybrid_cores():
    topo = hybrid(4, 8)
    p_cpus = CPUSet(c for c, i in topo.cpus.items() if i.kind == "performance")
    e_cpus = CPUSet(c for c, i in topo.cpus.items() if i.kind == "efficiency")
    p = policy(topo, [{"Name": "fast", "Namespaces": ["fast"], "AllocatorPriority": "performance"},
                      {"Name": "slow", "Namespaces": ["slow"], "AllocatorPriority": "efficiency"}],
               reserved=f"cpuset:{e_cpus.max()}")
    p.allocate(wl("f", 3000, "fast"))
    p.allocate(wl("s", 3000, "slow"))
    assert p.balloon_of("f").cpus.issubset(p_cpus)
    assert p.balloon_of("s").cpus.issubset(e_cpus)


# -- idle CPU sharing ---------------------------------------------------------------------------


@pytest.mark.parametrize("level, lent_within", [
    ("system", None), ("package", "package"), ("numa", "node"), ("die", "die"), ("core", "core"),
])
def test_idle_cpus_are_lent_within_the_level(level, lent_within):
    topo = machine(packages=2, cores=4, threads=2, nodes_per_package=2)
    p = policy(topo, [{"Name": "b", "Namespaces": ["b"], "ShareIdleCPUsInSame": level}], reserved="cpuset:0")
    d = p.allocate(wl("a", 1000, "b"))
    b = p.balloon_of("a")
    lent = d.resources.cpuset_cpus - b.cpus
    assert lent and lent.isdisjoint(CPUSet().union(*(x.cpus for x in p.balloons())))
    if lent_within is None:
        assert lent == p.free
    else:
        groups = [g for g in topo.groups(lent_within) if not g.isdisjoint(b.cpus)]
        assert lent == p.free & CPUSet().union(*groups)


def test_lent_cpus_taken_by_another_balloon_update_the_borrowers(two_nodes):
    p = policy(two_nodes, [{"Name": "b", "Namespaces": ["b"], "ShareIdleCPUsInSame": "system"}, BATCH],
               reserved="cpuset:0")
    p.allocate(wl("a", 1000, "b"))
    before = p.resources("a").cpuset_cpus
    d = p.allocate(wl("x", 4000, "batch"))
    taken = p.balloon_of("x").cpus
    assert "a" in d.others and d.others["a"].cpuset_cpus == before - taken
    d = p.release("x")
    assert d.others["a"].cpuset_cpus == before


def test_pin_memory_off_leaves_mems_alone(two_nodes):
    p = policy(two_nodes, [dict(BATCH, PinMemory=False)])
    assert p.allocate(wl("a", 1000, "batch")).resources.cpuset_mems is None
    r = p.allocate(wl("b", 1000, "web")).resources
    assert r.cpuset_mems == ",".join(map(str, two_nodes.nodes_of(r.cpuset_cpus)))


def test_4096_cpus():
    topo = machine(packages=8, cores=256, nodes_per_package=4, threads=2)
    assert len(topo.online) == 4096
    # Balloons that grow pod by pod stay in one node when each starts where most is free
    # (AllocatorTopologyBalancing); packed, the next balloon starts beside the last one.
    p = policy(topo, [dict(DP, MaxCPUs=64, MaxBalloons=32), dict(BATCH, MaxBalloons=64,
                                                                 ShareIdleCPUsInSame="numa")], reserved=8,
               AllocatorTopologyBalancing=True)
    for i in range(200):
        p.allocate(wl(f"d{i}", 6000, "dpdk"))
        p.allocate(wl(f"b{i}", 3000, "batch"))
    sizes = [len(b.cpus) for b in p.balloons() if b.type.name == "dataplane"]
    assert all(2 <= s <= 64 for s in sizes) and len(sizes) <= 32
    for b in p.balloons():
        if b.type.name == "dataplane":
            assert len(topo.nodes_of(b.cpus)) == 1, b.name  # 64 CPUs fit in a node


def test_l3cache_sharing_lends_only_the_ccx_and_nothing_without_l3_data():
    topo = machine(packages=1, dies=2, cores=4, l3_cores=2, threads=2)  # L3 = 2 cores = 4 CPUs
    p = policy(topo, [{"Name": "b", "Namespaces": ["b"], "ShareIdleCPUsInSame": "l3cache"}], reserved="cpuset:0")
    d = p.allocate(wl("a", 1000, "b"))
    own = p.balloon_of("a").cpus
    l3 = CPUSet(c for c in topo.online if topo.cpu(c).l3 == topo.cpu(own.min()).l3)
    assert d.resources.cpuset_cpus == own | (l3 & p.free)
    flat = machine(cores=4, threads=2)  # no cache data: nothing to lend within
    q = policy(flat, [{"Name": "b", "Namespaces": ["b"], "ShareIdleCPUsInSame": "l3cache"}], reserved="cpuset:0")
    assert q.allocate(wl("a", 1000, "b")).resources.cpuset_cpus == q.balloon_of("a").cpus


def test_hidden_hyperthreads_stay_hidden_in_lent_cpus():
    topo = machine(cores=4, threads=2)
    p = policy(topo, [{"Name": "b", "Namespaces": ["b"], "HideHyperthreads": True,
                       "ShareIdleCPUsInSame": "system"}], reserved="cpuset:0-1")
    d = p.allocate(wl("a", 1000, "b"))
    seen = d.resources.cpuset_cpus
    assert all(len(topo.siblings(c) & seen) == 1 for c in seen)
    assert len(seen) == 3  # its core and one thread of each of the 2 idle cores
