"""topology-aware's resize keeps what it can of a container's exclusive CPUs: growing, it
takes the free SMT siblings of the cores it holds before other CPUs (as a create takes
whole cores), and shrinking it keeps CPUs it had (policy.py resize, placement.py)."""

from __future__ import annotations

import dataclasses

import pytest
from policy_testkit import workload as wl

from cri_resmgr.policy.api import QoS, ResizeError
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


def test_growing_to_whole_cpus_no_pool_can_give_is_refused_not_run_shared():
    # Two nodes of 4 single-thread cores. x holds CPU 4 of node1; three Burstable containers
    # with limits need 1600m each in the nodes' shared CPUs. Grown to 3 CPUs, no pool can
    # give 3 CPUs of its own and keep its shared containers' CPUs, though the root's shared
    # CPUs hold 3000m more: placement runs it shared there and rewrites its request to no
    # exclusive CPUs. Before, the resize compared against that rewritten request and went
    # through, silently, onto shared CPUs; the resize must be refused, with x as it was.
    t = machine(packages=1, cores=8, threads=1, nodes_per_package=2)
    p = policy(t)
    p.allocate(wl("x", G, 1000, cpu_limit=1000))
    for i in range(3):
        p.allocate(wl(f"b{i}", QoS.BURSTABLE, 1600, cpu_limit=1601))
    before = {k: p.resources(k) for k in p.book.members}
    held = exclusive(p, "x")
    assert len(held) == 1
    with pytest.raises(ResizeError, match="wants 3 exclusive CPUs but no pool can give them"):
        resize(p, "x", 3000)
    assert exclusive(p, "x") == held
    assert {k: p.resources(k) for k in p.book.members} == before
