"""The static-plus policy: reserved, isolated and shared pools."""

from __future__ import annotations

import pytest
from policy_testkit import workload as wl

from cri_resmgr.policy.api import PolicyError, QoS
from cri_resmgr.policy.context import ConfigValueError, build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.static_plus import StaticPlusPolicy
from cri_resmgr.topology.cpuset import CPUSet

G, B, BE = QoS.GUARANTEED, QoS.BURSTABLE, QoS.BESTEFFORT
ISOLATED = CPUSet("4-7")


@pytest.fixture
def topo(make_topology):
    # 4 cores x 2 threads (0-1, 2-3, 4-5, 6-7); the kernel isolates the last two cores.
    return make_topology(sockets=1, cores_per_die=4, threads_per_core=2, isolated=ISOLATED)


def plus(topology, reserved="cpuset:0", available=None, **options) -> StaticPlusPolicy:
    return StaticPlusPolicy(build_context(topology, available=available, reserved=reserved, options=options))


def cpus(d) -> CPUSet:
    return getattr(d, "resources", d).cpuset_cpus


def test_pools_are_disjoint_and_idle_isolated_cpus_are_not_shared(topo):
    p = plus(topo)
    assert p.reserved == CPUSet("0")
    assert p.isolated == ISOLATED
    assert p.shared == CPUSet("1-3")
    assert cpus(p.allocate(wl("be", BE))) == CPUSet("1-3")
    assert cpus(p.allocate(wl("bu", B, 500))) == CPUSet("1-3")
    assert cpus(p.allocate(wl("sys", B, 2000, system=True))) == CPUSet("0")
    assert cpus(p.allocate(wl("pr", BE, prefer_reserved=True))) == CPUSet("0")


def test_exclusive_cpus_come_from_isolated_first(topo):
    p = plus(topo)
    p.allocate(wl("be", BE))
    d = p.allocate(wl("g", G, 2000))
    assert cpus(d).issubset(ISOLATED) and len(cpus(d)) == 2
    assert cpus(d) in set(topo.cores())
    assert d.others == {}  # the shared pool did not change
    assert p.assignments()["g"].pool == "isolated"


def test_burstable_with_whole_cpus_gets_exclusive(topo):
    p = plus(topo)
    d = p.allocate(wl("b", B, 2000))
    assert len(cpus(d)) == 2 and cpus(d).issubset(ISOLATED)


def test_prefer_isolated_false_takes_from_shared_pool(topo):
    p = plus(topo)
    p.allocate(wl("be", BE))
    d = p.allocate(wl("g", G, 1000, prefer_isolated=False))
    assert cpus(d).issubset(CPUSet("1-3"))
    assert set(d.others) == {"be"}
    assert d.others["be"].cpuset_cpus == CPUSet("1-3") - cpus(d)
    assert p.assignments()["g"].pool == "exclusive"


def test_fractional_request_gets_exclusive_plus_shared(topo):
    p = plus(topo)
    d = p.allocate(wl("f", B, 1500))
    excl = p.assignments()["f"].exclusive
    assert len(excl) == 1 and excl.issubset(ISOLATED)
    assert cpus(d) == excl | CPUSet("1-3")
    assert p.assignments()["f"].pool == "shared"
    # When the shared pool shrinks, the fractional container follows it.
    g = p.allocate(wl("g", G, 1000, prefer_isolated=False))
    assert set(g.others) == {"f"}
    assert g.others["f"].cpuset_cpus == excl | (CPUSet("1-3") - cpus(g))
    back = p.release("g")
    assert back.others["f"].cpuset_cpus == excl | CPUSet("1-3")


def test_prefer_shared_stays_shared(topo):
    p = plus(topo)
    assert cpus(p.allocate(wl("s", G, 2000, prefer_shared=True))) == CPUSet("1-3")


def test_exhausted_isolated_falls_back_to_shared_pool_but_keeps_its_last_cpu(topo):
    p = plus(topo)
    p.allocate(wl("be", BE))
    a = p.allocate(wl("a", G, 3000))  # 4 isolated free: from isolated
    assert cpus(a).issubset(ISOLATED)
    b = p.allocate(wl("b", G, 2000))  # 1 isolated left: from the shared pool 1-3
    assert cpus(b).issubset(CPUSet("1-3")) and set(b.others) == {"be"}
    c = p.allocate(wl("c", G, 1000))  # isolated 1 free: fits
    assert cpus(c).issubset(ISOLATED)
    d = p.allocate(wl("d", G, 1000))  # shared has one CPU left: not given away
    assert d.warning and "d" in d.warning
    assert cpus(d) == p.shared and len(p.shared) == 1
    assert p.assignments()["d"].exclusive == CPUSet()


def test_no_shared_pool_left_is_a_config_error(make_topology):
    topo = make_topology(sockets=1, cores_per_die=2, threads_per_core=2, isolated=CPUSet("1-3"))
    with pytest.raises(ConfigValueError, match="no CPUs left for the static-plus shared pool"):
        plus(topo)


def test_unknown_option_is_rejected(topo):
    with pytest.raises(ConfigValueError, match="policy.static-plus.Foo: unknown option"):
        plus(topo, Foo=1)


def test_others_never_contains_unchanged_or_self(topo):
    p = plus(topo)
    p.allocate(wl("be", BE))
    p.allocate(wl("sys", BE, system=True))
    p.allocate(wl("iso", G, 1000))
    d = p.allocate(wl("x", B, 2500, prefer_isolated=False))
    assert set(d.others) == {"be"}
    assert cpus(d) == p.assignments()["x"].exclusive | p.shared
    assert p.release("iso").others == {}  # isolated CPUs back: shared pool unchanged
    assert set(p.release("x").others) == {"be"}


def test_allocate_twice_is_an_error(topo):
    p = plus(topo)
    p.allocate(wl("a", BE))
    with pytest.raises(PolicyError, match="a"):
        p.allocate(wl("a", BE))


def test_without_isolated_cpus_exclusive_come_from_shared(make_topology):
    topo = make_topology(sockets=1, cores_per_die=4, threads_per_core=2)
    p = plus(topo, reserved=1)
    assert p.isolated == CPUSet()
    p.allocate(wl("be", BE))
    d = p.allocate(wl("g", B, 2000))
    assert set(d.others) == {"be"} and len(cpus(d)) == 2 and 0 not in cpus(d)


def test_registry_builds_static_plus(topo):
    policy = default_registry().lookup("static-plus").factory(build_context(topo, reserved="cpuset:0"))
    assert isinstance(policy, StaticPlusPolicy)
