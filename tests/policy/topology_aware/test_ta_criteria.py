"""Each placement criterion on its own, then their order."""

from __future__ import annotations

from cri_resmgr.policy.topology_aware import criteria as c
from cri_resmgr.policy.topology_aware.criteria import Candidate
from cri_resmgr.policy.topology_aware.pooltree import build_tree
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology

TREE = build_tree(fake_topology(sockets=2, cores_per_die=2, numa_per_socket=2),
                  fake_topology(sockets=2, cores_per_die=2, numa_per_socket=2).online, CPUSet())
ROOT, PKG, NODE, NODE2 = TREE["root"], TREE["package0"], TREE["node0"], TREE["node1"]


def test_memory_fits():
    assert c.memory_fits(Candidate(NODE, memory_fits=True)) > c.memory_fits(Candidate(NODE, memory_fits=False))


def test_affinity():
    assert c.affinity(Candidate(NODE, affinity=2)) > c.affinity(Candidate(NODE, affinity=-1))


def test_memory_kind():
    assert c.memory_kind(Candidate(NODE, kinds=2)) > c.memory_kind(Candidate(NODE, kinds=1))


def test_isolated():
    assert c.isolated(Candidate(NODE, isolated=True)) > c.isolated(Candidate(NODE))


def test_tightest():
    assert c.tightest(Candidate(NODE)) > c.tightest(Candidate(PKG)) > c.tightest(Candidate(ROOT))


def test_balance():
    assert c.balance(Candidate(NODE, free_milli=3000)) > c.balance(Candidate(NODE, free_milli=2500))
    assert c.balance(Candidate(NODE, free_exclusive=2)) > c.balance(Candidate(NODE, free_milli=1500))


def test_position():
    assert c.position(Candidate(NODE)) > c.position(Candidate(NODE2))


def test_order_affinity_kind_isolated_tightness_memory_balance():
    roomy_root = Candidate(ROOT, affinity=5, free_milli=10_000)
    assert c.explain(roomy_root, Candidate(NODE), c.CRITERIA) == "affinity"
    assert c.explain(Candidate(ROOT, kinds=2), Candidate(NODE, kinds=1)) == "memory-kind"
    assert c.explain(Candidate(ROOT, isolated=True), Candidate(NODE)) == "isolated"
    assert c.explain(Candidate(NODE, memory_fits=False), Candidate(ROOT, memory_fits=True)) == "tightest"
    assert c.explain(Candidate(NODE2, memory_fits=True), Candidate(NODE, memory_fits=False, free_milli=9000)) \
        == "memory-fits"
    assert c.explain(Candidate(NODE), Candidate(ROOT, free_milli=10_000)) == "tightest"
    assert c.explain(Candidate(NODE2, free_milli=2000), Candidate(NODE, free_milli=1000)) == "balance"
    assert c.explain(Candidate(NODE2, load=1), Candidate(NODE, load=2)) == "load"
    assert c.explain(Candidate(NODE2, reserved=0), Candidate(NODE, reserved=1)) == "unreserved"
    assert c.explain(Candidate(NODE), Candidate(NODE2)) == "position"
    assert c.explain(Candidate(NODE2), Candidate(NODE)) is None
    ranked = c.rank([Candidate(ROOT), Candidate(NODE2), Candidate(NODE), Candidate(PKG)])
    assert [x.pool.name for x in ranked] == ["node0", "node1", "package0", "root"]
    assert c.best([]) is None
    assert [name for name, _ in c.CRITERIA] == ["affinity", "memory-kind", "isolated", "tightest",
                                                "memory-fits", "balance", "load", "unreserved",
                                                "position"]
