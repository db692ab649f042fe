"""static and static-plus restore: which saved assignments still hold (the procedure's
steps, for every policy: test_restore_procedure.py)."""

from __future__ import annotations

import pytest
from policy_testkit import workload as wl

from cri_resmgr.policy.api import Assignment, PolicyError, QoS
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.static import StaticPolicy
from cri_resmgr.policy.static_plus import StaticPlusPolicy
from cri_resmgr.topology.cpuset import CPUSet

G, B, BE = QoS.GUARANTEED, QoS.BURSTABLE, QoS.BESTEFFORT


@pytest.fixture
def topo(make_topology):
    # 8 cores x 2 threads, linear (cores 0-1, 2-3, ...); CPUs 12-15 isolated.
    return make_topology(sockets=1, cores_per_die=8, threads_per_core=2, isolated=CPUSet("12-15"))


def static(topo, **options):
    return StaticPolicy(build_context(topo, reserved="cpuset:0-1", options=options))


def plus(topo):
    return StaticPlusPolicy(build_context(topo, reserved="cpuset:0-1"))


def test_round_trip_keeps_everything_and_reports_every_container(topo):
    workloads = [wl("be", BE), wl("g2", G, 2000), wl("sys", B, 100, system=True), wl("g1", G, 1000),
                 wl("bu", B, 1500)]
    first = static(topo)
    for w in workloads:
        first.allocate(w)
    saved = {k: Assignment.from_json(a.to_json()) for k, a in first.assignments().items()}

    second = static(topo)
    d = second.restore([(w, saved[w.key]) for w in workloads])
    assert d.resources is None and d.warning is None
    assert list(d.others) == [w.key for w in workloads]
    for w in workloads:
        assert d.others[w.key] == first.resources(w.key)
        assert second.resources(w.key) == first.resources(w.key)
    assert second.assignments() == first.assignments()
    assert second.shared == first.shared


def test_overlapping_exclusive_sets_are_not_double_booked(topo):
    items = [
        (wl("a", G, 2000), Assignment("exclusive", CPUSet("2-3"))),
        (wl("b", G, 2000), Assignment("exclusive", CPUSet("3-4"))),  # overlaps a
        (wl("s", BE), Assignment("shared")),
    ]
    p = static(topo)
    d = p.restore(items)
    got = p.assignments()
    assert got["a"].exclusive == CPUSet("2-3")
    assert len(got["b"].exclusive) == 2 and got["b"].exclusive.isdisjoint(CPUSet("0-3"))
    assert d.others["s"].cpuset_cpus == CPUSet("0-15") - got["a"].exclusive - got["b"].exclusive
    assert set(d.others) == {"a", "b", "s"}


@pytest.mark.parametrize("saved", [
    Assignment("exclusive", CPUSet("1-2")),  # includes a reserved CPU
    Assignment("exclusive", CPUSet("2")),  # wrong count
    Assignment("exclusive", CPUSet("2-4")),  # wrong count
    Assignment("shared", CPUSet()),  # wanted exclusive but ran shared
    Assignment("reserved", CPUSet()),  # not a system container
    Assignment("isolated", CPUSet("2-3")),  # not a static pool
    None,  # never placed
])
def test_invalid_or_missing_assignments_are_placed_anew(topo, saved):
    p = static(topo)
    p.restore([(wl("g", G, 2000), saved)])
    got = p.assignments()["g"]
    assert got.pool == "exclusive"
    assert len(got.exclusive) == 2 and got.exclusive.isdisjoint(CPUSet("0-1"))


def test_exclusive_cpus_outside_available_are_placed_anew(topo):
    narrow = StaticPolicy(build_context(topo, available="0-7", reserved="cpuset:0-1"))
    narrow.restore([(wl("g", G, 2000), Assignment("exclusive", CPUSet("10-11")))])
    assert narrow.assignments()["g"].exclusive.issubset(CPUSet("2-7"))


def test_strict_reservation_change_moves_system_containers(topo):
    # Saved by a policy without reserved CPUs: the system container ran shared.
    p = static(topo)
    d = p.restore([(wl("sys", BE, system=True), Assignment("shared"))])
    assert d.others["sys"].cpuset_cpus == CPUSet("0-1")


def test_restore_replaces_previous_state(topo):
    p = static(topo)
    p.allocate(wl("old", G, 4000))
    p.restore([(wl("new", BE), None)])
    assert set(p.assignments()) == {"new"}
    assert p.shared == CPUSet("0-15")


def test_restore_warns_when_exclusive_cpus_run_out(topo):
    p = static(topo)
    items = [(wl(f"g{i}", G, 4000), None) for i in range(4)]  # 14 assignable CPUs
    d = p.restore(items)
    assert d.warning and "g3" in d.warning
    assert d.others["g3"].cpuset_cpus == p.shared


def test_static_plus_round_trip_with_fractional_and_isolated(topo):
    workloads = [wl("be", BE), wl("iso", G, 2000), wl("frac", B, 1500, prefer_isolated=False),
                 wl("sh", G, 3000, prefer_isolated=False), wl("sys", BE, system=True)]
    first = plus(topo)
    for w in workloads:
        first.allocate(w)
    second = plus(topo)
    d = second.restore([(w, a) for w, a in ((w, first.assignments()[w.key]) for w in workloads)])
    assert set(d.others) == {w.key for w in workloads}
    for w in workloads:
        assert d.others[w.key] == first.resources(w.key)
    assert second.assignments() == first.assignments()


def test_policy_switch_static_to_static_plus(topo):
    workloads = [wl("be", BE), wl("g", G, 2000), wl("bu", B, 2000)]
    old = static(topo)
    for w in workloads:
        old.allocate(w)
    saved = old.assignments()
    new = plus(topo)
    d = new.restore([(w, saved[w.key]) for w in workloads])
    got = new.assignments()
    # g's exclusive CPUs came from what static-plus calls its shared pool: still valid.
    assert got["g"] == saved["g"]
    # bu ran shared under static; static-plus gives it 2 exclusive CPUs, isolated first.
    assert got["bu"].exclusive.issubset(CPUSet("12-15")) and len(got["bu"].exclusive) == 2
    assert d.others["be"].cpuset_cpus == CPUSet("2-11") - saved["g"].exclusive


def test_static_plus_prefer_isolated_false_rejects_saved_isolated_cpus(topo):
    p = plus(topo)
    p.restore([(wl("g", G, 1000, prefer_isolated=False), Assignment("isolated", CPUSet("12")))])
    assert p.assignments()["g"].exclusive.issubset(CPUSet("2-11"))


@pytest.mark.parametrize("make", [static, plus])
def test_live_reconfiguration_that_takes_exclusive_cpus_away_is_refused(topo, make):
    # Before: static and static-plus ignored `live` and ran the container shared with a
    # warning; a live change that cannot hold the running containers is refused (as under
    # topology-aware and balloons), the policy's state untouched.
    old = make(topo)
    g = wl("g", G, 2000)
    old.allocate(g)
    saved = old.assignment("g")
    # Room for no 2 exclusive CPUs besides the one shared CPU kept for shared containers.
    narrow = StaticPolicy(build_context(topo, available="0-2", reserved="cpuset:0-1")) if make is static else \
        StaticPlusPolicy(build_context(topo, available="0-3", reserved="cpuset:0-1"))
    narrow.allocate(wl("x", BE))
    before = dict(narrow.assignments())
    with pytest.raises(PolicyError, match=r"refused, the running containers do not fit: default/pod-g:g \(g\) holds "
                                          r"2 exclusive CPUs and could not get them again \(its saved placement: CPUs"):
        narrow.restore([(g, saved)], live=True)
    assert dict(narrow.assignments()) == before and narrow.shared == CPUSet("0-2" if make is static else "2-3")
    # At start-up: placed shared, and said.
    d = narrow.restore([(g, saved)])
    assert "(g) holds 2 exclusive CPUs and could not get them again" in d.warning
    assert narrow.assignment("g").exclusive == CPUSet()
