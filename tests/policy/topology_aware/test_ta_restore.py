"""Restart and live reconfiguration: keep what may stay, move what must, refuse only
when the running containers cannot fit (and then change nothing)."""

from __future__ import annotations

import pytest
from ta_testkit import make, wl

from cri_resmgr.policy.api import Assignment, PolicyError
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology


@pytest.fixture
def topo():
    return fake_topology(sockets=2, cores_per_die=4, numa_per_socket=2)  # 16 CPUs, nodes of 4


def populate(policy):
    ws = [wl("g2", "Guaranteed", 2000), wl("m", "Guaranteed", 1500), wl("b", "Burstable", 500),
          wl("be", "BestEffort"), wl("sys", "Burstable", 100, namespace="kube-system", system=True),
          wl("wide", "Burstable", 200, annotations={"unlimited-burstable": "true"})]
    for w in ws:
        policy.allocate(w)
    return ws


def test_restart_keeps_everything(topo):
    old = make(topo, reserved=1)
    ws = populate(old)
    saved = old.assignments()
    new = make(topo, reserved=1)
    d = new.restore([(w, saved[w.key]) for w in ws])
    assert new.assignments() == saved
    assert d.others == {w.key: old.resources(w.key) for w in ws}
    assert not d.warning


def test_restart_round_trips_through_json(topo):
    old = make(topo, reserved=1)
    ws = populate(old)
    saved = {k: Assignment.from_json(a.to_json()) for k, a in old.assignments().items()}
    new = make(topo, reserved=1)
    new.restore([(w, saved[w.key]) for w in ws])
    assert new.assignments() == old.assignments()


def test_items_without_assignment_or_from_other_policies_are_placed_anew(topo):
    new = make(topo)
    d = new.restore([(wl("g", "Guaranteed", 2000), None),
                     (wl("s", "Guaranteed", 1000), Assignment("exclusive", CPUSet([3])))])  # static's
    assert len(new.assignment("g").exclusive) == 2 and len(new.assignment("s").exclusive) == 1
    assert set(d.others) == {"g", "s"}


def test_double_booked_saved_cpus_are_not_kept_twice(topo):
    old = make(topo)
    old.allocate(wl("a", "Guaranteed", 2000))
    a = old.assignment("a")
    new = make(topo)
    new.restore([(wl("a", "Guaranteed", 2000), a), (wl("b", "Guaranteed", 2000), a)])
    assert new.assignment("a") == a and new.assignment("b").exclusive.isdisjoint(a.exclusive)


def test_shrinking_available_moves_only_what_must(topo):
    old = make(topo)
    ws = [wl("left", "Guaranteed", 2000), wl("right", "Guaranteed", 2000), wl("bl", "Burstable", 500),
          wl("br", "Burstable", 500)]
    # Put one of each on each socket.
    for w in ws:
        old.allocate(w)
    saved = old.assignments()
    on_socket0 = {k for k, a in saved.items() if old.tree[a.pool].cpus.issubset(CPUSet.parse("0-7"))}
    assert on_socket0 and on_socket0 != set(saved)
    new = make(topo, available="cpuset:0-7")
    d = new.restore([(w, saved[w.key]) for w in ws])
    restored = new.assignments()
    for key in on_socket0:
        assert restored[key] == saved[key], f"{key} could stay but moved"
    for key in set(saved) - on_socket0:
        assert new.resources(key).cpuset_cpus.issubset(CPUSet.parse("0-7"))
        assert len(restored[key].exclusive) == len(saved[key].exclusive)
    assert set(d.others) == set(saved)


def test_refused_when_running_containers_cannot_fit(topo):
    old = make(topo)
    ws = [wl(f"g{i}", "Guaranteed", 2000) for i in range(5)]
    for w in ws:
        old.allocate(w)
    saved = old.assignments()
    new = make(topo, available="cpuset:0-7")
    with pytest.raises(PolicyError, match=r"do not fit: .*holds 2 exclusive CPUs"):
        new.restore([(w, saved[w.key]) for w in ws], live=True)
    assert not new.assignments(), "refused: nothing changed"
    # The same from the state file (a start-up): placed best-effort, and said.
    d = make(topo, available="cpuset:0-7").restore([(w, saved[w.key]) for w in ws])
    assert "holds 2 exclusive CPUs and could not get them again" in d.warning and set(d.others) == {w.key for w in ws}
    # Restoring into a policy that already holds state leaves that state as it was.
    old_state = old.assignments()
    with pytest.raises(PolicyError):
        old.restore(live=True, items=[(w, saved[w.key]) for w in ws] + [(wl("extra", "Guaranteed", 8000), None),
                                                        (wl("more", "Guaranteed", 8000),
                                                         Assignment("root", CPUSet.parse("0-7"),
                                                                    {"class": "exclusive"}))])
    assert old.assignments() == old_state


def test_reserved_change_moves_reserved_and_the_cpus_they_free(topo):
    old = make(topo, reserved="cpuset:0")
    ws = populate(old)
    saved = old.assignments()
    new = make(topo, reserved="cpuset:0-1")
    new.restore([(w, saved[w.key]) for w in ws])
    assert new.resources("sys").cpuset_cpus == CPUSet([0, 1])
    for key, a in new.assignments().items():
        assert a.exclusive.isdisjoint(CPUSet([0, 1])), key
        if a.exclusive and a.details["class"] == "exclusive":
            assert not new.resources(key).cpuset_cpus & CPUSet([0, 1])
    assert {k: len(a.exclusive) for k, a in new.assignments().items()} == \
        {k: len(a.exclusive) for k, a in saved.items()}


def test_option_change_re_places_isolated_holders():
    topo = fake_topology(sockets=1, cores_per_die=4, isolated=[6, 7])
    old = make(topo)
    old.allocate(wl("i", "Guaranteed", 1000))
    assert old.assignment("i").exclusive <= CPUSet([6, 7])
    new = make(topo, PreferIsolatedCPUs=False)
    new.restore([(wl("i", "Guaranteed", 1000), old.assignment("i"))])
    assert new.assignment("i").exclusive.isdisjoint(CPUSet([6, 7])) and len(new.assignment("i").exclusive) == 1


def test_pin_memory_change_applies_to_kept_containers(topo):
    old = make(topo)
    ws = populate(old)
    new = make(topo, PinMemory=False)
    d = new.restore([(w, old.assignment(w.key)) for w in ws])
    assert all(r.cpuset_mems is None for r in d.others.values())
    assert {k: a.exclusive for k, a in new.assignments().items()} == \
        {k: a.exclusive for k, a in old.assignments().items()}


def test_refused_when_shared_requests_would_be_overcommitted(topo):
    old = make(topo)
    ws = [wl(f"b{i}", "Burstable", 3000) for i in range(5)]
    for w in ws:
        assert not old.allocate(w).warning
    saved = old.assignments()
    with pytest.raises(PolicyError, match="would run overcommitted"):
        make(topo, available="cpuset:0-7").restore([(w, saved[w.key]) for w in ws], live=True)
    assert make(topo, available="cpuset:0-14").restore([(w, saved[w.key]) for w in ws]).warning is None


def test_what_ran_overcommitted_restarts_as_it_was(topo):
    policy = make(topo, available="cpuset:0-3")
    ws = [wl(f"b{i}", "Burstable", 1500) for i in range(4)]
    warned = [policy.allocate(w).warning for w in ws]
    assert warned[:2] == [None, None] and all("overcommitted" in w for w in warned[2:])
    saved = policy.assignments()
    assert [a.details.get("overcommitted", False) for a in saved.values()] == [False, False, True, True]
    new = make(topo, available="cpuset:0-3")
    new.restore([(w, saved[w.key]) for w in reversed(ws)])
    assert new.assignments() == saved
