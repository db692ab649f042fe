"""In-place resize in balloons (policy/balloons/resize.py): a container whose balloon can
take its new size stays in it and the balloon inflates or deflates around the CPUs it
has; one that its balloon cannot hold moves to another balloon of its type; a size that
cannot be met is refused with every balloon as it was."""

from __future__ import annotations

import dataclasses

import pytest
from balloons_testkit import annotated, by_name, policy, wl

from cri_resmgr.policy.api import QoS, ResizeError, Workload
from cri_resmgr.policy.balloons import BalloonsPolicy
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine

G = QoS.GUARANTEED
BATCH = {"Name": "batch", "Namespaces": ["batch*"], "MaxBalloons": 2}
# Each Guaranteed pod of whole CPUs in a balloon of its own (isolation.py: dedicated).
OWN = {"Name": "own", "Namespaces": ["own"], "PreferNewBalloons": True}


@pytest.fixture
def two_nodes():
    # 2 packages x 4 cores x 2 threads, linear: package 0 = 0-7, package 1 = 8-15; CPU 0
    # is reserved (its sibling 1 is taken last).
    return machine(packages=2, cores=4, threads=2)


def sized(w: Workload, cpu: int) -> Workload:
    return dataclasses.replace(w, cpu_request=cpu, cpu_limit=cpu if w.qos is G else w.cpu_limit)


def state(p: BalloonsPolicy) -> tuple:
    """Everything a refused resize must leave as it was."""
    balloons = {b.name: (b.cpus, dict(b.members), b.requested, b.resources) for b in p.balloons()}
    keys = list(p.book.member)
    return (balloons, p.free, dict(p.assignments()), {k: p.resources(k) for k in keys},
            {k: p.balloon_of(k).name for k in keys}, set(p.book.fallback))


def resize(p: BalloonsPolicy, key: str, cpu: int):
    return p.resize(sized(p.balloon_of(key).members[key], cpu))


def test_a_container_that_fits_stays_and_its_balloon_grows_around_its_cpus(two_nodes):
    p = policy(two_nodes, [BATCH])
    p.allocate(wl("a", 1000, "batch"))
    p.allocate(wl("b", 500, "batch"))
    b = p.balloon_of("b")
    had = b.cpus
    assert len(had) == 2

    d = resize(p, "b", 2500)
    assert p.balloon_of("b") is b and len(b.cpus) == 4 and had < b.cpus  # kept what it had
    assert d.resources.cpuset_cpus == b.cpus and d.warning is None
    assert set(d.others) == {"a"} and d.others["a"] == d.resources  # its balloon mate is told
    assert b.members["b"].cpu_request == 2500 and b.requested == 3500
    assert p.free == CPUSet("1-15") - b.cpus


def test_a_shrinking_container_stays_and_its_balloon_deflates(two_nodes):
    p = policy(two_nodes, [BATCH])
    p.allocate(wl("a", 1000, "batch"))
    p.allocate(wl("b", 3000, "batch"))
    b = p.balloon_of("b")
    had = b.cpus
    assert len(had) == 4

    d = resize(p, "b", 500)
    assert p.balloon_of("b") is b and len(b.cpus) == 2 and b.cpus < had
    assert set(d.others) == {"a"} and d.others["a"].cpuset_cpus == b.cpus
    assert p.free == CPUSet("1-15") - b.cpus  # what it gave back is free again


def test_a_resize_that_changes_no_cpu_count_tells_nobody(two_nodes):
    p = policy(two_nodes, [BATCH])
    p.allocate(wl("a", 1000, "batch"))
    p.allocate(wl("b", 400, "batch"))
    cpus = p.balloon_of("b").cpus
    d = resize(p, "b", 900)  # 1400m -> 1900m: still 2 CPUs
    assert d.others == {} and p.balloon_of("b").cpus == cpus and p.balloon_of("b").requested == 1900


def test_a_container_its_balloon_cannot_hold_moves_to_another_of_its_type(two_nodes):
    capped = {"Name": "capped", "Namespaces": ["capped"], "MaxCPUs": 2, "MaxBalloons": 2}
    p = policy(two_nodes, [capped])
    p.allocate(wl("a", 1000, "capped"))
    p.allocate(wl("b", 1000, "capped"))
    first = p.balloon_of("a")
    assert p.balloon_of("b") is first

    d = resize(p, "b", 2000)  # 3000m in a balloon of at most 2 CPUs: b moves
    moved = p.balloon_of("b")
    assert moved is not first and moved.type.name == "capped" and len(moved.cpus) == 2
    assert d.resources.cpuset_cpus == moved.cpus
    assert len(first.cpus) == 1 and d.others["a"].cpuset_cpus == first.cpus  # a's balloon deflated


def test_a_refused_resize_leaves_every_balloon_as_it_was(two_nodes):
    p = policy(two_nodes, [dict(BATCH, MaxBalloons=1)])
    p.allocate(wl("a", 1000, "batch"))
    p.allocate(wl("b", 500, "batch"))
    p.allocate(wl("d", 2000))  # default balloon
    before = state(p)

    with pytest.raises(ResizeError) as e:
        resize(p, "b", 14000)  # 15 CPUs: 12 are free, and no other batch balloon may be made
    assert "(b)" in str(e.value) and "14000m" in str(e.value)
    assert "best-effort" not in str(e.value)  # a refused resize runs it nowhere else
    assert state(p) == before

    resize(p, "b", 1500)  # and it works afterwards
    assert len(p.balloon_of("b").cpus) == 3


def test_a_shrink_in_a_balloon_already_short_is_not_refused(two_nodes):
    # Placed best-effort (the balloon is capped below its requests): a smaller request
    # makes it no worse, so it is taken, not refused as a create of that size would be.
    capped = {"Name": "capped", "Namespaces": ["capped"], "MaxCPUs": 2, "MaxBalloons": 1}
    p = policy(two_nodes, [capped])
    p.allocate(wl("a", 1000, "capped"))
    assert p.allocate(wl("b", 2000, "capped")).warning  # 3 CPUs asked of a 2-CPU balloon
    b = p.balloon_of("b")
    d = resize(p, "b", 1500)
    assert p.balloon_of("b") is b and b.requested == 2500 and len(b.cpus) == 2
    assert d.resources.cpuset_cpus == b.cpus


def test_an_unknown_annotated_type_does_not_refuse_a_resize(two_nodes):
    # The create warned about the annotation; a resize is about the size only.
    p = policy(two_nodes, [BATCH])
    assert p.allocate(annotated("a", "nosuch", 1000, "batch")).warning
    b = p.balloon_of("a")
    d = resize(p, "a", 2000)
    assert p.balloon_of("a") is b and len(b.cpus) == 2 and d.resources.cpuset_cpus == b.cpus


def test_the_reserved_balloon_takes_any_size(two_nodes):
    p = policy(two_nodes, [BATCH])
    p.allocate(wl("k", 100, "kube-system"))
    d = resize(p, "k", 3000)
    assert p.balloon_of("k").name == "reserved[0]" and d.resources.cpuset_cpus == CPUSet("0")
    assert d.others == {}


# -- dedicated balloons (isolation.py) --------------------------------------------------------------


def g(key: str, cpu: int, namespace: str = "own") -> Workload:
    return wl(key, cpu, namespace, qos=G, cpu_limit=cpu)


def test_a_dedicated_container_grows_in_its_own_balloon(two_nodes):
    p = policy(two_nodes, [OWN])
    p.allocate(g("x", 2000))
    p.allocate(g("y", 2000))
    b = p.balloon_of("x")
    had = b.cpus

    d = resize(p, "x", 3000)
    assert p.balloon_of("x") is b and had < b.cpus and len(b.cpus) == 3
    assert p.assignment("x").exclusive == b.cpus  # still its own
    assert b.cpus.isdisjoint(p.balloon_of("y").cpus) and "y" not in d.others

    d = resize(p, "x", 1000)
    assert p.balloon_of("x") is b and len(b.cpus) == 1 and b.cpus < had


def test_a_dedicated_container_that_becomes_fractional_keeps_its_balloon(two_nodes):
    p = policy(two_nodes, [OWN])
    p.allocate(g("x", 2000))
    b = p.balloon_of("x")
    had = b.cpus
    resize(p, "x", 1500)
    assert p.balloon_of("x") is b and b.cpus == had  # 1500m still needs 2 CPUs
    assert not p.assignment("x").exclusive  # no longer dedicated: its CPUs are not counted exclusive


def test_a_growing_dedicated_container_takes_the_slack_of_other_balloons(two_nodes):
    # The default balloon's rounding (9500m holds 10 CPUs) gives way to a dedicated
    # container, as on a create; its members are told their new cpuset.
    p = policy(two_nodes, [OWN])
    p.allocate(wl("fill", 9500))
    p.allocate(g("x", 4000))
    x = p.balloon_of("x")
    assert len(p.free) == 1 and len(x.cpus) == 4 and len(p.balloon_of("fill").cpus) == 10

    had = x.cpus
    d = resize(p, "x", 6000)
    assert p.balloon_of("x") is x and had < x.cpus and len(x.cpus) == 6 and not p.free
    dflt = p.balloon_of("fill")
    assert len(dflt.cpus) == 9 and dflt.cpus.isdisjoint(x.cpus)
    assert d.others["fill"].cpuset_cpus == dflt.cpus and d.warning is None
    assert p.assignment("x").exclusive == x.cpus


def test_a_dedicated_container_that_cannot_grow_is_refused_with_nothing_moved(two_nodes):
    p = policy(two_nodes, [OWN])
    p.allocate(wl("fill", 9500))
    p.allocate(g("x", 4000))
    before = state(p)
    # 5 more CPUs: 1 is free and the default balloon can give 1 (its 500m of slack).
    with pytest.raises(ResizeError) as e:
        resize(p, "x", 9000)
    assert "(x)" in str(e.value) and "9000m" in str(e.value)
    assert state(p) == before


def test_a_container_becoming_dedicated_leaves_a_shared_balloon(two_nodes):
    # MaxBalloons 2 reached: two pods share own[1]; one of them grows into whole CPUs and
    # would share no longer... it moves only if a balloon of its own can be had: here
    # own[0] empties first, so it goes there.
    p = policy(two_nodes, [dict(OWN, MaxBalloons=2)])
    p.allocate(g("x", 2000))
    p.allocate(wl("f", 500, "own", qos=G, cpu_limit=500))
    p.allocate(wl("h", 500, "own", qos=G, cpu_limit=500))
    shared = p.balloon_of("h")
    assert p.balloon_of("f") is shared  # MaxBalloons reached: sharing is what it asks for
    p.release("x")
    d = resize(p, "h", 1000)
    assert p.balloon_of("h") is not shared and p.balloon_of("h").members.keys() == {"h"}
    assert p.assignment("h").exclusive == p.balloon_of("h").cpus
    assert set(by_name(p)) >= {"own[0]", "own[1]"} and d.resources.cpuset_cpus == p.balloon_of("h").cpus


def test_a_dedicated_container_moves_rather_than_grow_on_split_cores(two_nodes):
    # x holds 5; every free thread of package 0 (2, 6; 1 is beside the reserved CPU) is
    # beside another pod's dedicated CPU, while package 1 has whole free cores. Grown to
    # 3 CPUs where it is, it would split three cores; it moves to whole cores instead, as
    # a create of 3 CPUs would be placed.
    p = policy(two_nodes, [OWN, {"Name": "odd", "Namespaces": ["odd"], "PreferNewBalloons": True}])
    for k in "abc":
        p.allocate(g(k, 1000, "odd"))
    p.allocate(g("x", 1000))
    for k in "def":
        p.allocate(g(k, 1000, "odd"))
    assert p.balloon_of("x").cpus == CPUSet("5") and p.free == CPUSet("1,9-15")
    p.release("a")
    p.release("d")

    d = resize(p, "x", 3000)
    got = p.balloon_of("x").cpus
    assert len(got) == 3 and got <= CPUSet("8-15") and d.resources.cpuset_cpus == got
    split = [c for c in got if not two_nodes.siblings(c) <= got]
    assert len(split) <= 1, got
    assert p.assignment("x").exclusive == got


def test_a_dedicated_container_grows_where_it_is_by_whole_cores(two_nodes):
    # x holds 5; its sibling 4 is another pod's, 6-7 are free: grown to 3 CPUs it keeps 5
    # and takes the whole core 6-7 (not a thread of it and another stray).
    p = policy(two_nodes, [OWN, {"Name": "odd", "Namespaces": ["odd"], "PreferNewBalloons": True}])
    for k in "abc":
        p.allocate(g(k, 1000, "odd"))
    p.allocate(g("x", 1000))
    for k in "de":
        p.allocate(g(k, 1000, "odd"))
    p.release("d")
    p.release("e")
    assert p.balloon_of("x").cpus == CPUSet("5") and CPUSet("6-7") <= p.free

    resize(p, "x", 3000)
    assert p.balloon_of("x").cpus == CPUSet("5-7")


def test_a_refused_resize_leaves_an_empty_balloon_where_it_was(two_nodes):
    # The empty MinBalloons balloon dp[0] was made on CPU 2 when most CPUs were free. A
    # refusal used to put the balloons back by a restore, which keeps only the balloons with
    # containers and makes MinBalloons up afresh: dp[0] went to CPU 15, and the default
    # balloon's containers (sharing idle CPUs) saw 2 instead of 15 with nobody told.
    dp = {"Name": "dp", "Namespaces": ["dp"], "MinBalloons": 1, "MinCPUs": 1}
    shares = {"Name": "default", "ShareIdleCPUsInSame": "system"}
    p = policy(two_nodes, [dp, dict(BATCH, MaxBalloons=1), shares])
    assert p.book.balloons["dp[0]"].cpus == CPUSet([2])
    p.allocate(wl("d", 6000))
    p.allocate(wl("a", 1000, "batch"))
    before = state(p)

    with pytest.raises(ResizeError):
        resize(p, "a", 14000)
    assert p.book.balloons["dp[0]"].cpus == CPUSet([2])
    assert state(p) == before


def test_a_refused_resize_keeps_the_balloons_names(two_nodes):
    # The empty MinBalloons balloon is dp[1] (dp[0] went with its container); a restore
    # would make MinBalloons up as dp[0].
    dp = {"Name": "dp", "Namespaces": ["dp"], "MinBalloons": 1, "MinCPUs": 1, "MaxCPUs": 1}
    p = policy(two_nodes, [dp, dict(BATCH, MaxBalloons=1)])
    p.allocate(wl("x", 1000, "dp"))
    p.allocate(wl("y", 1000, "dp"))  # dp[0] is full: dp[1]
    p.release("x")
    p.release("y")  # dp[1] stays (MinBalloons), empty
    assert [b.name for b in p.balloons() if b.type.name == "dp"] == ["dp[1]"]
    p.allocate(wl("a", 1000, "batch"))
    before = state(p)

    with pytest.raises(ResizeError):
        resize(p, "a", 15000)  # 14 CPUs are not reserved nor dp[1]'s
    assert state(p) == before
