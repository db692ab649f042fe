"""topology-aware's resize keeps what it can of a container's exclusive CPUs: growing, it
takes the free SMT siblings of the cores it holds before other CPUs (as a create takes
whole cores), and shrinking it keeps CPUs it had (policy.py resize, placement.py)."""

from __future__ import annotations

import dataclasses

import pytest
from policy_testkit import workload as wl

from cri_resmgr.policy.api import QoS
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine

G, BE = QoS.GUARANTEED, QoS.BESTEFFORT


def policy(topology):
    return default_registry().lookup("topology-aware").factory(build_context(topology, reserved=1, options={}))


def resize(p, key: str, cpu: int):
    w = p.book.members[key].workload
    return p.resize(dataclasses.replace(w, cpu_request=cpu, cpu_limit=cpu))


def exclusive(p, key: str) -> CPUSet:
    return p.assignment(key).exclusive


@pytest.fixture
def eight():
    # 1 package, cores 0-1, 2-3, 4-5, 6-7; CPU 0 reserved.
    return machine(packages=1, cores=4, threads=2)


def test_growing_takes_the_free_sibling_of_the_core_it_holds(eight):
    # The shared containers need 4 CPUs (3500m); x holds 6, whose sibling 7 is shared.
    # Grown to 3 CPUs, it keeps 6 and takes 7 (a whole core) and one more thread; placed
    # again from scratch it took 2-4: it left its CPU and split core 4-5 while its own
    # core's sibling was free.
    p = policy(eight)
    for k in "abcde":  # (one CPU each: 1, 2, 3, 4, 5; x then gets 6)
        p.allocate(wl(k, G, 1000, cpu_limit=1000))
    p.allocate(wl("x", G, 1000, cpu_limit=1000))
    for k in "abcde":
        p.release(k)
    p.allocate(wl("s", G, 3000, cpu_limit=3000, prefer_shared=True))
    p.allocate(wl("t", G, 500, cpu_limit=500))
    held = exclusive(p, "x")
    assert len(held) == 1
    (cpu,) = held
    sibling = eight.siblings(cpu) - held

    d = resize(p, "x", 3000)
    got = exclusive(p, "x")
    assert len(got) == 3 and held | sibling <= got, (held, got)
    assert d.resources.cpuset_cpus == got


def test_shrinking_keeps_cpus_it_had(eight):
    p = policy(eight)
    p.allocate(wl("be", BE))
    p.allocate(wl("x", G, 3000, cpu_limit=3000))
    held = exclusive(p, "x")
    resize(p, "x", 2000)
    assert exclusive(p, "x") < held
    resize(p, "x", 1000)
    assert len(exclusive(p, "x")) == 1 and exclusive(p, "x") < held


def test_cpus_it_had_are_not_kept_at_the_price_of_spreading_wider():
    # Placer._take: held CPUs in two packages, two wanted: a pick from scratch fits one
    # package, so that wins over keeping both.
    topology = machine(packages=2, cores=4, threads=2)  # package 0 = 0-7, package 1 = 8-15
    p = policy(topology)
    free = CPUSet("1-15")
    assert p.placer._take(free, 2, CPUSet("6,14")) != CPUSet("6,14")
    assert len({topology.cpu(c).package for c in p.placer._take(free, 2, CPUSet("6,14"))}) == 1
    assert p.placer._take(free, 2, CPUSet("6-7")) == CPUSet("6-7")  # within one: kept
