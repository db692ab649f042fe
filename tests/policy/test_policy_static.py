"""The static policy: kubelet CPU manager static semantics as a decision module."""

from __future__ import annotations

import pytest
from policy_testkit import workload as wl

from cri_resmgr.policy.api import Decision, PolicyError, QoS
from cri_resmgr.policy.context import ConfigValueError, build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.static import StaticPolicy
from cri_resmgr.topology.cpuset import CPUSet

G, B, BE = QoS.GUARANTEED, QoS.BURSTABLE, QoS.BESTEFFORT


@pytest.fixture
def two_cpus(make_topology):
    return make_topology(sockets=1, cores_per_die=2, threads_per_core=1)


@pytest.fixture
def eight_cpus(make_topology):
    # 4 cores x 2 threads, linear: cores are 0-1, 2-3, 4-5, 6-7.
    return make_topology(sockets=1, cores_per_die=4, threads_per_core=2)


def static(topology, reserved=None, available=None, **options) -> StaticPolicy:
    return StaticPolicy(build_context(topology, available=available, reserved=reserved, options=options))


def cpus(decision_or_resources) -> CPUSet:
    res = getattr(decision_or_resources, "resources", decision_or_resources)
    return res.cpuset_cpus


def test_two_cpu_example_from_kubelet_docs(two_cpus):
    p = static(two_cpus, reserved=1)
    assert p.reserved == CPUSet("0")
    shared = p.allocate(wl("be", BE))
    assert cpus(shared) == CPUSet("0-1") and shared.others == {}

    d = p.allocate(wl("g", G, 1000))
    assert cpus(d) == CPUSet("1")
    assert d.resources.cpuset_mems == "0"
    assert d.warning is None
    assert {k: str(r.cpuset_cpus) for k, r in d.others.items()} == {"be": "0"}
    assert p.shared == CPUSet("0")
    assert p.resources("be").cpuset_cpus == CPUSet("0")

    back = p.release("g")
    assert back.resources is None
    assert {k: str(r.cpuset_cpus) for k, r in back.others.items()} == {"be": "0-1"}
    assert p.shared == CPUSet("0-1")


def test_integer_guaranteed_gets_exclusive_fractional_shares(eight_cpus):
    p = static(eight_cpus, reserved=1)
    d = p.allocate(wl("int", G, 2000))
    assert len(cpus(d)) == 2 and 0 not in cpus(d)
    # Two CPUs on an SMT-2 machine: one whole core.
    assert cpus(d) in set(eight_cpus.cores())
    frac = p.allocate(wl("frac", G, 1500))
    assert cpus(frac) == CPUSet("0-7") - cpus(d)
    assert p.assignments()["frac"].pool == "shared"
    assert p.assignments()["int"].exclusive == cpus(d)


@pytest.mark.parametrize("qos,milli", [(B, 2000), (B, 500), (BE, 0), (G, 0)])
def test_burstable_and_besteffort_share(eight_cpus, qos, milli):
    p = static(eight_cpus, reserved=1)
    d = p.allocate(wl("x", qos, milli))
    assert cpus(d) == CPUSet("0-7")
    assert p.assignments()["x"].exclusive == CPUSet()


def test_prefer_shared_keeps_integer_guaranteed_shared(eight_cpus):
    p = static(eight_cpus, reserved=1)
    d = p.allocate(wl("x", G, 2000, prefer_shared=True))
    assert cpus(d) == CPUSet("0-7")
    assert p.allocate(wl("y", G, 2000, prefer_shared=False)).resources.cpuset_cpus != CPUSet("0-7")


def test_reserved_cpus_are_shared_but_never_exclusive(eight_cpus):
    p = static(eight_cpus, reserved="cpuset:0-1")
    taken = CPUSet()
    for i in range(5):  # 6 assignable CPUs; the shared pool keeps the reserved ones
        d = p.allocate(wl(f"g{i}", G, 1000))
        assert d.warning is None
        taken |= cpus(d)
    assert taken.isdisjoint(CPUSet("0-1"))
    d = p.allocate(wl("g5", G, 1000))
    assert cpus(d) == CPUSet("2-7") - taken
    assert p.shared == CPUSet("0-1")
    # Nothing left but reserved CPUs: the next one runs shared, with a warning.
    last = p.allocate(wl("g6", G, 1000))
    assert cpus(last) == CPUSet("0-1")
    assert last.warning and "g6" in last.warning and "1 exclusive" in last.warning


def test_strict_reservation_keeps_reserved_for_system(eight_cpus):
    p = static(eight_cpus, reserved=1, StrictReservation=True)
    assert p.strict
    assert cpus(p.allocate(wl("be", BE))) == CPUSet("1-7")
    assert cpus(p.allocate(wl("sys", BE, system=True, namespace="kube-system"))) == CPUSet("0")
    d = p.allocate(wl("g", G, 2000))
    assert 0 not in cpus(d)
    assert set(d.others) == {"be"}
    assert d.others["be"].cpuset_cpus == CPUSet("1-7") - cpus(d)


def test_strict_reservation_accepts_string_booleans(eight_cpus):
    assert static(eight_cpus, reserved=1, StrictReservation="true").strict
    assert not static(eight_cpus, reserved=1, StrictReservation="false").strict


def test_strict_reservation_never_takes_last_shared_cpu(make_topology):
    topo = make_topology(sockets=1, cores_per_die=4, threads_per_core=1)
    p = static(topo, reserved=1, StrictReservation=True)  # shared 1-3
    d = p.allocate(wl("g", G, 3000))
    assert d.warning is not None
    assert cpus(d) == CPUSet("1-3")
    assert p.assignments()["g"].exclusive == CPUSet()
    ok = p.allocate(wl("h", G, 2000))
    assert ok.warning is None and len(cpus(ok)) == 2
    assert set(ok.others) == {"g"} and len(p.shared) == 1


def test_non_strict_without_reserved_keeps_one_shared_cpu(two_cpus):
    p = static(two_cpus)
    d = p.allocate(wl("g", G, 2000))
    assert d.warning and cpus(d) == CPUSet("0-1")
    ok = p.allocate(wl("h", G, 1000))
    assert ok.warning is None and len(cpus(ok)) == 1
    assert p.shared == CPUSet("0-1") - cpus(ok)


def test_system_and_prefer_reserved_run_on_reserved(eight_cpus):
    p = static(eight_cpus, reserved="cpuset:0-1")
    assert cpus(p.allocate(wl("sys", B, 500, system=True))) == CPUSet("0-1")
    assert cpus(p.allocate(wl("pr", BE, prefer_reserved=True))) == CPUSet("0-1")
    assert p.assignments()["sys"].pool == "reserved"
    # kubelet semantics: an integer Guaranteed system container is exclusive.
    g = p.allocate(wl("sysg", G, 1000, system=True))
    assert len(cpus(g)) == 1 and cpus(g).isdisjoint(CPUSet("0-1"))
    # Reserved containers never move: not in others.
    assert "sys" not in g.others and "pr" not in g.others


def test_system_without_reserved_cpus_runs_shared(eight_cpus):
    p = static(eight_cpus)
    assert cpus(p.allocate(wl("sys", BE, system=True))) == CPUSet("0-7")
    assert p.assignments()["sys"].pool == "shared"


def test_others_lists_exactly_the_changed_containers(eight_cpus):
    p = static(eight_cpus, reserved=1)
    p.allocate(wl("s1", BE))
    p.allocate(wl("s2", B, 300))
    p.allocate(wl("r", BE, system=True))
    first = p.allocate(wl("e1", G, 1000))
    assert set(first.others) == {"s1", "s2"}
    # One Resources object for every shared container of the same cpuset.
    assert first.others["s1"] is first.others["s2"]
    second = p.allocate(wl("e2", G, 2000))
    assert set(second.others) == {"s1", "s2"}
    shared_only = p.allocate(wl("s3", BE))
    assert shared_only.others == {}
    gone = p.release("e1")
    assert set(gone.others) == {"s1", "s2", "s3"}
    assert p.release("s1").others == {}
    assert p.release("r").others == {}


def test_numa_nodes_become_cpuset_mems(make_topology):
    topo = make_topology(sockets=2, cores_per_die=2, threads_per_core=2)  # nodes 0: 0-3, 1: 4-7
    p = static(topo, reserved=1)
    assert p.allocate(wl("be", BE)).resources.cpuset_mems == "0-1"
    d = p.allocate(wl("g", G, 4000))
    assert d.resources.cpuset_mems in ("0", "1")
    node = int(d.resources.cpuset_mems)
    assert cpus(d) == topo.node_cpus(node)


def test_allocate_twice_is_an_error_and_unknown_release_is_empty(eight_cpus):
    p = static(eight_cpus, reserved=1)
    p.allocate(wl("a", G, 1000))
    with pytest.raises(PolicyError, match="already placed"):
        p.allocate(wl("a", G, 1000))
    assert p.release("nope") == Decision()
    assert p.resources("nope") is None


def test_release_everything_restores_the_full_shared_set(eight_cpus):
    p = static(eight_cpus, reserved=1)
    for i in range(3):
        p.allocate(wl(f"g{i}", G, 2000))
    for i in range(3):
        p.release(f"g{i}")
    assert p.shared == CPUSet("0-7")
    assert p.assignments() == {}


def test_decisions_are_deterministic(eight_cpus):
    def run():
        p = static(eight_cpus, reserved=1)
        out = [p.allocate(wl("s", BE))]
        out += [p.allocate(wl(f"g{i}", G, 1000 * (i % 3 + 1))) for i in range(4)]
        out.append(p.release("g1"))
        return out

    assert run() == run()


@pytest.mark.parametrize("options,message", [
    ({"StrictReservaton": True}, "policy.static.StrictReservaton: unknown option"),
    ({"StrictReservation": "maybe"}, "policy.static.StrictReservation: expected true or false"),
])
def test_bad_options_name_the_key(eight_cpus, options, message):
    with pytest.raises(ConfigValueError, match=message):
        static(eight_cpus, reserved=1, **options)


def test_registry_builds_static(eight_cpus):
    info = default_registry().lookup("static")
    policy = info.factory(build_context(eight_cpus, reserved=1))
    assert isinstance(policy, StaticPolicy)
    assert cpus(policy.allocate(wl("g", G, 1000))) == CPUSet("1")
