"""Placement decisions: CPU classes, the tightest pool, balance, knock-on updates, memory."""

from __future__ import annotations

import pytest
from ta_testkit import GiB, make, wl

from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology


@pytest.fixture
def topo():
    # 2 sockets x 2 nodes x 4 cores x 2 threads (linear ids: node0 = 0-7? no: 4 cores per die
    # split over 2 nodes), memory-only node per socket, CPUs 30-31 isolated.
    return fake_topology(sockets=2, cores_per_die=8, numa_per_socket=2, memory_only_nodes=2, isolated=[30, 31])


def node_of(topo, cpus):
    return {topo.node_of(c) for c in cpus}


def test_shape(topo):
    policy = make(topo, reserved="cpuset:0")
    assert [p.name for p in policy.tree.pools] == ["root", "package0", "node0", "node1", "package1", "node2",
                                                   "node3"]
    assert policy.tree["node3"].isolated == CPUSet([30, 31])


def test_besteffort_goes_to_a_leaf_and_spreads(topo):
    policy = make(topo)
    pools = [policy.assignment(k).pool for k in "abcd" if policy.allocate(wl(k, "Burstable", 500)).resources]
    # node3 has 2 isolated CPUs, so less shared capacity: the fourth goes to node0 again.
    assert pools == ["node0", "node1", "node2", "node0"], "balance spreads over the leaves"
    res = policy.resources("a")
    assert res.cpuset_cpus == policy.book.shared[policy.tree[pools[0]]]
    assert res.cpuset_mems == str(min(node_of(topo, res.cpuset_cpus)))


def test_reserved_class_runs_on_reserved_cpus(topo):
    policy = make(topo, reserved="cpuset:0-1", ReservedPoolNamespaces=["monitoring-*"])
    for w in (wl("sys", "Burstable", 100, namespace="kube-system", system=True),
              wl("mon", "Guaranteed", 2000, namespace="monitoring-x"),
              wl("pref", "BestEffort", prefer_reserved=True)):
        d = policy.allocate(w)
        assert d.resources.cpuset_cpus == CPUSet([0, 1]) and d.resources.cpuset_mems == "0"
        assert policy.assignment(w.key).pool == "reserved" and not policy.assignment(w.key).exclusive
    assert make(topo).allocate(wl("sys2", system=True)).resources.cpuset_cpus != CPUSet([0, 1]), \
        "without reserved CPUs a system container runs shared"


def test_guaranteed_integer_gets_exclusive_cpus_and_shared_ones_are_updated(topo):
    policy = make(topo, reserved="cpuset:0")
    policy.allocate(wl("be", "BestEffort"))
    be_pool = policy.tree[policy.assignment("be").pool]
    before = policy.resources("be").cpuset_cpus
    # Push the exclusive one into the same node: fill the other leaves' balance.
    d = policy.allocate(wl("g", "Guaranteed", 2000))
    g_pool = policy.tree[policy.assignment("g").pool]
    cpus = d.resources.cpuset_cpus
    assert len(cpus) == 2 and cpus.issubset(g_pool.cpus) and len(node_of(topo, cpus)) == 1
    if g_pool is be_pool:
        assert d.others["be"].cpuset_cpus == before - cpus
    else:
        assert "be" not in d.others
    # A shared container of the ROOT pool always sees exclusive CPUs come and go.
    policy.allocate(wl("wide", "Burstable", 100, annotations={"unlimited-burstable": "true"}))
    assert policy.assignment("wide").pool == "root"
    d = policy.allocate(wl("g2", "Guaranteed", 1000, prefer_isolated=False))
    assert d.others["wide"].cpuset_cpus == policy.tree.root.sharable - policy.book.used
    assert d.resources.cpuset_cpus.isdisjoint(d.others["wide"].cpuset_cpus)
    d = policy.release("g2")
    assert d.resources is None and d.resources is None
    assert set(d.others) >= {"wide"} and d.others["wide"].cpuset_cpus >= policy.resources("g").cpuset_cpus.__class__()
    assert policy.resources("wide").cpuset_cpus == policy.tree.root.sharable - policy.resources("g").cpuset_cpus


def test_knock_on_updates_reach_pools_above_and_not_siblings(topo):
    policy = make(topo)
    keys = {}
    for name in ("node0", "node1", "package0", "root"):
        key = f"s-{name}"
        level = {"node0": None, "node1": None, "package0": "package", "root": "true"}[name]
        ann = {"unlimited-burstable": level} if level else {}
        policy.allocate(wl(key, "Burstable", 100, annotations=ann))
        keys[policy.assignment(key).pool] = key
    assert set(keys) >= {"package0", "root"}
    leaf = policy.assignment(keys.get("node0", keys.get("node1"))).pool
    # An exclusive container that lands in that leaf: the leaf, package0 and root change, not the sibling.
    d = policy.allocate(wl("x", "Guaranteed", 2000, annotations={"affinity": "- match: {key: name, operator: In, "
                                                                 f"values: [{keys[leaf]}]}}"}))
    assert policy.assignment("x").pool == leaf
    sibling = "node1" if leaf == "node0" else "node0"
    assert set(d.others) == {keys[leaf], keys["package0"], keys["root"]} - {keys.get(sibling)}


def test_mixed_guaranteed_gets_exclusive_plus_the_pool_shared(topo):
    policy = make(topo, reserved="cpuset:0")
    d = policy.allocate(wl("m", "Guaranteed", 2500, prefer_shared=False))
    a = policy.assignment("m")
    assert len(a.exclusive) == 2 and a.details["class"] == "mixed"
    assert d.resources.cpuset_cpus == a.exclusive | policy.book.shared[policy.tree[a.pool]]
    # Another exclusive in the same pool changes the mixed one's shared part.
    d2 = policy.allocate(wl("x", "Guaranteed", 1000, annotations={"affinity": "- match: {key: name, operator: "
                                                                  "Equals, values: [m]}"}))
    assert policy.assignment("x").pool == a.pool
    assert d2.others["m"].cpuset_cpus == a.exclusive | policy.book.shared[policy.tree[a.pool]]
    assert d2.resources.cpuset_cpus.isdisjoint(d2.others["m"].cpuset_cpus)


def test_several_cpus_mixed_or_isolated_only_when_annotated(topo):
    # As the references: 2.x CPUs are shared unless prefer-shared-cpus: "false"; 1.x mixed.
    policy = make(topo)
    policy.allocate(wl("two-half", "Guaranteed", 2500))
    policy.allocate(wl("one-half", "Guaranteed", 1500, prefer_isolated=False))
    assert policy.assignment("two-half").details["class"] == "shared"
    assert policy.assignment("one-half").details["class"] == "mixed"
    # Isolated CPUs (30-31 here): a 1-CPU container by default, a 2-CPU one only when annotated.
    policy.allocate(wl("two", "Guaranteed", 2000))
    assert policy.assignment("two").exclusive.isdisjoint(CPUSet([30, 31]))
    policy.allocate(wl("two-iso", "Guaranteed", 2000, prefer_isolated=True))
    assert policy.assignment("two-iso").exclusive == CPUSet([30, 31])


def test_fractional_guaranteed_and_prefer_shared_run_shared(topo):
    policy = make(topo)
    for w in (wl("f", "Guaranteed", 500), wl("p", "Guaranteed", 2000, prefer_shared=True)):
        policy.allocate(w)
        assert not policy.assignment(w.key).exclusive and policy.assignment(w.key).details["class"] == "shared"
    shared_by_option = make(topo, PreferSharedCPUs=True)
    shared_by_option.allocate(wl("g", "Guaranteed", 2000))
    assert not shared_by_option.assignment("g").exclusive
    d = shared_by_option.allocate(wl("g2", "Guaranteed", 2000, prefer_shared=False))
    assert len(d.resources.cpuset_cpus) == 2, "the annotation overrides the option"


def test_isolated_cpus_when_preferred(topo):
    policy = make(topo)
    d = policy.allocate(wl("i", "Guaranteed", 2000, prefer_isolated=True))
    assert d.resources.cpuset_cpus == CPUSet([30, 31]) and policy.assignment("i").details["isolated"]
    d = policy.allocate(wl("j", "Guaranteed", 1000))
    assert not d.resources.cpuset_cpus & CPUSet([30, 31]), "isolated ones are taken"
    assert make(topo, PreferIsolatedCPUs=False).allocate(wl("k", "Guaranteed", 1000)).resources.cpuset_cpus \
        .isdisjoint(CPUSet([30, 31]))
    policy.release("i")
    assert policy.allocate(wl("l", "Guaranteed", 1000)).resources.cpuset_cpus.issubset(CPUSet([30, 31]))


def test_big_request_goes_up_the_tree(topo):
    policy = make(topo)
    d = policy.allocate(wl("big", "Guaranteed", 12000))
    assert policy.assignment("big").pool.startswith("package"), "12 CPUs do not fit an 8-CPU node"
    assert len(node_of(topo, d.resources.cpuset_cpus)) == 2
    assert d.resources.cpuset_mems in ("0-1", "2-3")


def test_shortage_runs_shared_with_a_warning():
    topo = fake_topology(sockets=1, cores_per_die=2)
    policy = make(topo, reserved="cpuset:0")
    d = policy.allocate(wl("g", "Guaranteed", 4000))
    assert d.warning and "wants 4 exclusive CPUs" in d.warning and "(g)" in d.warning
    assert not policy.assignment("g").exclusive and d.resources.cpuset_cpus == CPUSet.parse("0-3")
    d = policy.allocate(wl("h", "Guaranteed", 2000))
    assert d.warning and not policy.assignment("h").exclusive, "the shared containers keep their CPU requests"


def test_the_last_shared_cpu_is_never_given_away():
    topo = fake_topology(sockets=1, cores_per_die=2)
    policy = make(topo)
    policy.allocate(wl("be", "BestEffort"))
    d = policy.allocate(wl("g", "Guaranteed", 4000))
    assert d.warning and not policy.assignment("g").exclusive
    policy.release("g")
    d = policy.allocate(wl("g3", "Guaranteed", 3000))
    assert not d.warning and len(d.resources.cpuset_cpus) == 3
    assert policy.resources("be").cpuset_cpus == CPUSet([0, 1, 2, 3]) - d.resources.cpuset_cpus
    assert d.others == {"be": policy.resources("be")}


def test_unlimited_burstable_levels(topo):
    policy = make(topo)
    for value, level in (("true", "root"), ("package", "package"), ("node", "node"), ("false", "node")):
        key = f"u-{value}"
        policy.allocate(wl(key, "Burstable", 100, annotations={"unlimited-burstable": value}))
        assert policy.tree[policy.assignment(key).pool].level == level, value
    # Only for Burstable without a limit.
    policy.allocate(wl("lim", "Burstable", 100, cpu_limit=200, annotations={"unlimited-burstable": "true"}))
    assert policy.tree[policy.assignment("lim").pool].level == "node"
    d = policy.allocate(wl("bad", "Burstable", 100, annotations={"unlimited-burstable": "galaxy"}))
    assert "unlimited-burstable" in d.warning and "galaxy" in d.warning


def test_memory_pinning_and_widening(topo):
    policy = make(topo)
    d = policy.allocate(wl("small", "Burstable", 100, memory_request=GiB))
    assert d.resources.cpuset_mems == str(min(node_of(topo, d.resources.cpuset_cpus)))
    # Each CPU node has 16 GiB: 20 GiB must widen to the package, 40 GiB to the root.
    d = policy.allocate(wl("wide", "Burstable", 100, memory_request=20 * GiB))
    a = policy.assignment("wide")
    assert policy.tree[a.pool].level == "node" and policy.tree[a.details["mem_pool"]].level == "package"
    assert len(d.resources.cpuset_mems.split("-")) == 2
    d = policy.allocate(wl("huge", "Burstable", 100, memory_request=40 * GiB))
    assert d.resources.cpuset_mems == "0-3"
    policy.release("huge")
    assert policy.book.memory["root"] == 21 * GiB


def test_memory_fit_outranks_tightness(topo):
    policy = make(topo)
    policy.allocate(wl("hog", "Burstable", 100, memory_request=15 * GiB))
    hog = policy.assignment("hog").pool
    for i in range(3):
        policy.allocate(wl(f"o{i}", "Burstable", 100, memory_request=10 * GiB))
        assert policy.assignment(f"o{i}").pool != hog


def test_memory_types(topo):
    policy = make(topo)
    d = policy.allocate(wl("p", "Burstable", 100, annotations={"memory-type": "pmem"}))
    pool = policy.tree[policy.assignment("p").pool]
    assert d.resources.cpuset_mems in ("4", "5")
    assert policy.tree[policy.assignment("p").pool].level == "node" and pool.memory.get("pmem")
    d = policy.allocate(wl("dp", "Burstable", 100, annotations={"memory-type": "dram, cxl"}))
    assert len(d.resources.cpuset_mems.split(",")) == 2
    d = policy.allocate(wl("h", "Burstable", 100, annotations={"memory-type": "hbm"}))
    assert policy.assignment("h").details["kinds"] == ["dram"], "no HBM here: DRAM"
    d = policy.allocate(wl("x", "Burstable", 100, annotations={"memory-type": "flash"}))
    assert "memory-type" in d.warning and "flash" in d.warning


def test_pin_options(topo):
    policy = make(topo, PinMemory=False)
    assert policy.allocate(wl("a", "Burstable", 100)).resources.cpuset_mems is None
    policy = make(topo, PinCPU=False)
    policy.allocate(wl("s", "Burstable", 100))
    d = policy.allocate(wl("g", "Guaranteed", 1000))
    assert d.resources.cpuset_cpus == topo.online and not d.others
    assert policy.resources("s").cpuset_cpus == topo.online


def test_no_shared_cpu_left_is_a_config_error():
    topo = fake_topology(sockets=1, cores_per_die=2, isolated=[0, 1, 2, 3])
    with pytest.raises(ConfigValueError, match="no CPUs left for shared containers"):
        make(topo)
    # Reserved CPUs run shared containers too: with them there is a shared pool.
    assert make(topo, reserved="cpuset:0").allocate(wl("be")).resources.cpuset_cpus == CPUSet([0])


def test_usage_reports_the_tree(topo):
    policy = make(topo, reserved="cpuset:0")
    policy.allocate(wl("g", "Guaranteed", 2000))
    policy.allocate(wl("s", "Burstable", 300, namespace="kube-system", system=True))
    u = policy.usage()
    names = [p.name for p in u.pools]
    assert names[0] == "reserved" and names[1] == "root"
    gpool = next(p for p in u.pools if "g" in p.containers)
    assert gpool.kind == "node" and gpool.parent.startswith("package") and gpool.requested_milli == 2000
    assert gpool.exclusive == policy.assignment("g").exclusive and gpool.mems
    assert u.exclusive == {"g": policy.assignment("g").exclusive}
    assert u.members == {"reserved": 1, gpool.name: 1}
    assert not u.exclusive_free & policy.assignment("g").exclusive and 0 not in u.exclusive_free
    assert u.pool_cpus()["exclusive"] == policy.assignment("g").exclusive


def test_known_key_is_refused_and_unknown_release_is_empty(topo):
    from cri_resmgr.policy.api import PolicyError
    policy = make(topo)
    policy.allocate(wl("a"))
    with pytest.raises(PolicyError, match="already placed"):
        policy.allocate(wl("a"))
    d = policy.release("nope")
    assert d.resources is None and not d.others


def test_hbm_memory_type():
    import dataclasses

    from cri_resmgr.topology import Topology
    base = fake_topology(sockets=1, cores_per_die=4, memory_only_nodes=1)
    nodes = [dataclasses.replace(n, kind="hbm") if n.memory_only else n for n in base.nodes.values()]
    topo = Topology(base.cpus.values(), nodes)
    policy = make(topo)
    assert policy.tree.root.memory == {"dram": frozenset({0}), "hbm": frozenset({1})}
    assert policy.allocate(wl("h", "Burstable", 100, annotations={"memory-type": "hbm"})).resources.cpuset_mems == "1"
    assert policy.allocate(wl("dh", annotations={"memory-type": "hbm,dram"})).resources.cpuset_mems == "0-1"
    assert policy.allocate(wl("p", annotations={"memory-type": "pmem"})).resources.cpuset_mems == "0", \
        "no PMEM here: DRAM"
