"""Cold start: memory on PMEM first, on DRAM once the policy's timer fires."""

from __future__ import annotations

from ta_testkit import GiB, make, wl

from tests.harness.sysfs import fake_topology


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_cold_start_moves_memory_to_dram_when_due():
    topo = fake_topology(sockets=1, cores_per_die=4, numa_per_socket=1, memory_only_nodes=1)
    clock = Clock()
    policy = make(topo, clock=clock)
    assert policy.next_deadline() is None
    d = policy.allocate(wl("c", "Burstable", 500, memory_request=GiB, annotations={"cold-start": "30s"}))
    assert d.resources.cpuset_mems == "1" and policy.assignment("c").details["kinds"] == ["pmem"]
    policy.allocate(wl("w", "Burstable", 500))
    assert policy.next_deadline() == 1030.0
    assert policy.expire(1029.9).others == {}
    d = policy.expire(1030.0)
    assert set(d.others) == {"c"} and d.others["c"].cpuset_mems == "0"
    assert d.others["c"].cpuset_cpus == policy.resources("w").cpuset_cpus
    assert policy.next_deadline() is None and policy.assignment("c").details["kinds"] == ["dram"]
    assert policy.book.memory["root"] == GiB


def test_cold_start_survives_a_restart_and_is_ignored_without_pmem():
    topo = fake_topology(sockets=1, cores_per_die=4, memory_only_nodes=1)
    clock = Clock()
    old = make(topo, clock=clock)
    w = wl("c", "Burstable", 500, annotations={"cold-start": "2m"})
    old.allocate(w)
    new = make(topo, clock=clock)
    new.restore([(w, old.assignment("c"))])
    assert new.next_deadline() == 1120.0 and new.resources("c").cpuset_mems == "1"
    plain = make(fake_topology(sockets=1, cores_per_die=4), clock=clock)
    d = plain.allocate(w)
    assert d.resources.cpuset_mems == "0" and plain.next_deadline() is None
    d = plain.allocate(wl("bad", annotations={"cold-start": "soon"}))
    assert "cold-start" in d.warning and "soon" in d.warning
