"""In-place resize as a decision (policy/resize.py, PoolPolicy.resize): every policy grows
and shrinks a container, crosses between shared and exclusive, tells the others whose
CPUs changed, and refuses a size it cannot meet with nothing changed."""

from __future__ import annotations

import dataclasses
import random

import pytest
from policy_testkit import workload as wl

from cri_resmgr.policy.api import Policy, QoS, Resizable, ResizeError, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.resize import resize
from cri_resmgr.topology.cpuset import CPUSet

G, BU, BE = QoS.GUARANTEED, QoS.BURSTABLE, QoS.BESTEFFORT
POLICIES = ("static", "static-plus", "topology-aware", "balloons")


@pytest.fixture
def eight(make_topology):
    # 1 socket, 4 cores x 2 threads: cores are 0-1, 2-3, 4-5, 6-7.
    return make_topology(sockets=1, cores_per_die=4, threads_per_core=2)


def build(name: str, topology, reserved=1, **options) -> Policy:
    if name == "balloons":
        options.setdefault("BalloonTypes", [{"Name": "dedicated", "MatchExpressions": [
            {"key": "qosclass", "operator": "Equals", "values": ["Guaranteed"]}]}])
    info = default_registry().lookup(name)
    return info.factory(build_context(topology, reserved=reserved, options=options))


class Driver:
    """Places and resizes as the engine does: the workloads it believes in, and the
    resources last applied to each (from decisions only)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.workloads: dict[str, Workload] = {}
        self.applied: dict = {}

    def add(self, w: Workload) -> None:
        d = self.policy.allocate(w)
        self.workloads[w.key] = w
        self.applied[w.key] = d.resources
        self.applied.update(d.others)

    def resize(self, key: str, cpu: int):
        w = dataclasses.replace(self.workloads[key], cpu_request=cpu,
                                cpu_limit=cpu if self.workloads[key].qos is G else None)
        placed = lambda: list(self.workloads.values())  # noqa: E731
        d = resize(self.policy, w, placed)
        self.workloads[key] = w
        self.applied[key] = d.resources
        self.applied.update(d.others)
        return d

    def check(self) -> None:
        """What was applied is what the policy holds: no update was lost."""
        for key in self.workloads:
            assert self.applied[key] == self.policy.resources(key), key

    def exclusive(self, key: str) -> CPUSet:
        a = self.policy.assignment(key)
        return a.exclusive if a is not None else CPUSet()

    def cpus(self, key: str) -> CPUSet:
        return self.policy.resources(key).cpuset_cpus


@pytest.mark.parametrize("name", POLICIES)
def test_shared_to_exclusive_and_back_updates_the_others(name, eight):
    d = Driver(build(name, eight))
    d.add(wl("be", BE))
    d.add(wl("g", G, 500, cpu_limit=500))
    before = d.cpus("be")
    assert not d.exclusive("g")

    grown = d.resize("g", 2000)
    d.check()
    assert len(d.cpus("g")) == 2
    assert d.cpus("g").isdisjoint(d.cpus("be"))  # the BestEffort container left them
    if before & d.cpus("g"):
        assert "be" in grown.others  # told it lost CPUs

    d.resize("g", 500)
    d.check()
    assert not d.exclusive("g")
    assert d.cpus("be") == before  # back where it was


@pytest.mark.parametrize("name", ["static", "static-plus"])
def test_pool_policies_keep_the_cpus_a_container_has(name, eight):
    d = Driver(build(name, eight))
    d.add(wl("be", BE))
    d.add(wl("g", G, 2000, cpu_limit=2000))
    had = d.exclusive("g")
    assert len(had) == 2

    d.resize("g", 3000)
    assert had < d.exclusive("g") and len(d.exclusive("g")) == 3  # grown around what it had
    three = d.exclusive("g")
    d.resize("g", 1000)
    assert d.exclusive("g") < three and len(d.exclusive("g")) == 1  # shrunk within it
    d.check()


@pytest.mark.parametrize("name", POLICIES)
def test_a_resize_that_cannot_be_met_changes_nothing(name, eight):
    d = Driver(build(name, eight))
    d.add(wl("be", BE))
    d.add(wl("g", G, 2000, cpu_limit=2000))
    d.add(wl("b", BU, 500))
    assignments = dict(d.policy.assignments())
    resources = {k: d.policy.resources(k) for k in d.workloads}

    with pytest.raises(ResizeError) as e:
        d.resize("g", 8000)  # 8 CPUs, one of them reserved
    assert "g" in str(e.value) or "8" in str(e.value)
    # It names the container and what it asked, and not where a create would have run it
    # instead: a refused resize runs it nowhere else, it keeps what it has.
    assert "pod-g:g" in str(e.value) and ("8 exclusive" in str(e.value) or "8000m" in str(e.value))
    assert "running it" not in str(e.value) and "best-effort" not in str(e.value), str(e.value)
    assert dict(d.policy.assignments()) == assignments
    assert {k: d.policy.resources(k) for k in d.workloads} == resources

    d.resize("g", 1000)  # and it still works afterwards
    d.check()


def test_static_refusal_says_what_is_free(eight):
    p = build("static", eight)
    d = Driver(p)
    d.add(wl("g", G, 2000, cpu_limit=2000))
    with pytest.raises(ResizeError) as e:
        d.resize("g", 8000)
    assert "wants 8 exclusive CPUs but only 7 can be given" in str(e.value)
    assert "running it on" not in str(e.value)  # it keeps what it has


@pytest.mark.parametrize("name", POLICIES)
def test_every_built_in_policy_is_resizable(name, eight):
    assert isinstance(build(name, eight), Resizable)


@pytest.mark.parametrize("name", POLICIES)
def test_random_resizes_keep_the_books_straight(name, make_topology):
    topo = make_topology(sockets=2, cores_per_die=4, threads_per_core=2, numa_per_socket=2)
    d = Driver(build(name, topo))
    rng = random.Random(26)
    n = 0
    for step in range(300):
        if len(d.workloads) < 4 or rng.random() < 0.3:
            n += 1
            qos = rng.choice([G, G, BU, BE])
            cpu = 0 if qos is BE else rng.choice([250, 1000, 1500, 2000, 3000])
            d.add(wl(f"c{n}", qos, cpu, cpu_limit=cpu if qos is G else None))
        elif rng.random() < 0.2:
            key = rng.choice(sorted(d.workloads))
            d.applied.update(d.policy.release(key).others)
            del d.workloads[key], d.applied[key]
        else:
            key = rng.choice(sorted(d.workloads))
            if d.workloads[key].qos is BE:
                continue
            assignments = dict(d.policy.assignments())
            try:
                d.resize(key, rng.choice([250, 1000, 1500, 2000, 3000, 5000]))
            except ResizeError:
                assert dict(d.policy.assignments()) == assignments, step
        d.check()
        exclusive = [d.exclusive(k) for k in d.workloads]
        assert sum(len(x) for x in exclusive) == len(CPUSet().union(*exclusive)), step  # no double booking
