"""restore(): balloons rebuilt on their saved CPUs after a restart; a changed configuration
re-sizes and re-places them live."""

from __future__ import annotations

import pytest
from balloons_testkit import by_name, policy, wl

from cri_resmgr.policy.api import Assignment, PolicyError
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine

DP = {"Name": "dataplane", "Namespaces": ["dpdk"], "MinCPUs": 2, "MaxCPUs": 6, "MinBalloons": 1}
BATCH = {"Name": "batch", "Namespaces": ["batch"], "ShareIdleCPUsInSame": "package"}
WORKLOADS = [wl("d1", 1500, "dpdk"), wl("d2", 2000, "dpdk"), wl("b1", 1000, "batch"), wl("w", 0, "web"),
             wl("s", 0, "kube-system")]


@pytest.fixture
def topo():
    return machine(packages=2, cores=4, threads=2)


def _running(topo, types=(DP, BATCH)):
    p = policy(topo, list(types))
    for w in WORKLOADS:
        p.allocate(w)
    return p


def _saved(p):
    return {k: Assignment.from_json(a.to_json()) for k, a in p.assignments().items()}


def test_round_trip_keeps_every_balloon_and_reports_every_container(topo):
    first = _running(topo)
    saved = _saved(first)
    assert saved["d1"].details == {"balloon": "dataplane[0]", "type": "dataplane",
                                   "cpus": str(first.balloon_of("d1").cpus)}
    second = policy(topo, [DP, BATCH])
    d = second.restore([(w, saved[w.key]) for w in WORKLOADS])
    assert d.warning is None and d.resources is None
    assert set(d.others) == {w.key for w in WORKLOADS}
    assert dict(second.assignments()) == dict(first.assignments())
    for w in WORKLOADS:
        assert second.resources(w.key) == first.resources(w.key) == d.others[w.key]


def test_lowered_max_cpus_shrinks_live_and_updates_members(topo):
    first = _running(topo)
    assert len(first.balloon_of("d1").cpus) == 4
    second = policy(topo, [dict(DP, MaxCPUs=3), BATCH])
    d = second.restore([(w, a) for w in WORKLOADS if (a := _saved(first).get(w.key)) is not None])
    b = second.balloon_of("d1")
    assert len(b.cpus) == 3 and b.cpus.issubset(first.balloon_of("d1").cpus)  # kept, shrunk in place
    assert d.others["d1"].cpuset_cpus == b.cpus == d.others["d2"].cpuset_cpus


def test_removed_type_re_places_its_containers(topo):
    first = _running(topo)
    second = policy(topo, [DP])  # batch is gone: its container goes to default
    second.restore([(w, _saved(first)[w.key]) for w in WORKLOADS])
    assert second.balloon_of("b1").type.name == "default"
    assert second.balloon_of("d1").cpus == first.balloon_of("d1").cpus


def test_new_type_takes_matching_containers(topo):
    first = _running(topo)
    web = {"Name": "web", "Namespaces": ["web"], "MinCPUs": 2}
    second = policy(topo, [DP, BATCH, web])
    second.restore([(w, _saved(first)[w.key]) for w in WORKLOADS])
    assert second.balloon_of("w").name == "web[0]" and len(second.balloon_of("w").cpus) == 2


def test_overlapping_saved_balloons_are_not_double_booked(topo):
    a = wl("a", 2000, "batch")
    b = wl("b", 2000, "dpdk")
    items = [(a, Assignment("batch[0]", details={"balloon": "batch[0]", "type": "batch", "cpus": "2-3"})),
             (b, Assignment("dataplane[0]", details={"balloon": "dataplane[0]", "type": "dataplane",
                                                     "cpus": "3-4"}))]
    p = policy(topo, [DP, BATCH], reserved="cpuset:0")
    p.restore(items)
    assert p.balloon_of("a").cpus == CPUSet("2-3")
    assert p.balloon_of("b").cpus.isdisjoint(CPUSet("2-3"))


@pytest.mark.parametrize("details", [
    {}, {"balloon": "batch[x]", "type": "batch", "cpus": "2"}, {"balloon": "batch[0]", "type": "batch",
                                                              "cpus": "junk"},
    {"balloon": "dataplane[0]", "type": "dataplane", "cpus": "2-3"},  # not its type any more
    {"balloon": "batch[0]", "type": "batch", "cpus": "0"},  # the reserved CPU
])
def test_unusable_saved_assignments_are_placed_anew(topo, details):
    p = policy(topo, [DP, BATCH], reserved="cpuset:0")
    d = p.restore([(wl("a", 1000, "batch"), Assignment("x", details=details))])
    assert p.balloon_of("a").type.name == "batch" and "a" in d.others
    assert 0 not in p.balloon_of("a").cpus


def test_restore_meets_min_balloons(topo):
    p = policy(topo, [dict(DP, MinBalloons=2)])
    p.restore([])
    assert {"dataplane[0]", "dataplane[1]", "default[0]"} <= set(by_name(p))


# -- live reconfiguration: assignments handed over in memory -----------------------------------


def test_live_reconfiguration_that_fits_is_applied(topo):
    first = _running(topo)
    live = dict(first.assignments())  # in memory, as the engine hands them to the successor
    second = policy(topo, [dict(DP, MinCPUs=3), BATCH])
    d = second.restore([(w, live[w.key]) for w in WORKLOADS], live=True)
    assert len(second.balloon_of("d1").cpus) == 4 and set(d.others) == {w.key for w in WORKLOADS}


@pytest.mark.parametrize("changed, reason", [
    ([dict(DP, MaxCPUs=3), BATCH], r"dpdk/pod-d\w:d\w \(d\w\) in dataplane\[0\]: 3 of the 4 CPUs"),
    ([DP, dict(BATCH, MaxCPUs=1, MaxBalloons=1, MinCPUs=1), {"Name": "x", "Namespaces": ["x"], "MinCPUs": 9,
                                                              "MinBalloons": 1}],
     "no batch balloon can hold it|containers need|MinBalloons"),
])
def test_live_reconfiguration_that_cannot_hold_the_containers_is_refused(topo, changed, reason):
    first = _running(topo)
    first.allocate(wl("b2", 1000, "batch"))
    live = dict(first.assignments())
    second = policy(topo, changed)
    with pytest.raises(PolicyError, match=reason):
        second.restore([(w, live[w.key]) for w in [*WORKLOADS, wl("b2", 1000, "batch")]], live=True)
    # The same change read from the state file (a restart) is placed best-effort instead.
    third = policy(topo, changed)
    d = third.restore([(w, Assignment.from_json(live[w.key].to_json()))
                       for w in [*WORKLOADS, wl("b2", 1000, "batch")]])
    assert d.warning
