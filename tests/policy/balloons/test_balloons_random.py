"""Seeded random create/remove/restart sequences of the balloons policy, with the
invariant checker (balloons_testkit.check_invariants) after every step."""

from __future__ import annotations

import pytest
from balloons_testkit import hybrid, make_factory, run_random

from tests.topology.shapes import machine

TYPES = {
    "plain": [
        {"Name": "dataplane", "Namespaces": ["dpdk"], "MinCPUs": 1, "MaxCPUs": 4, "MinBalloons": 1,
         "MaxBalloons": 2},
        {"Name": "batch", "Namespaces": ["batch"], "MaxBalloons": 3},
    ],
    "hht-share": [
        {"Name": "dataplane", "Namespaces": ["dpdk"], "MinCPUs": 1, "MaxCPUs": 3, "MinBalloons": 1,
         "HideHyperthreads": True, "AllocatorPriority": "performance"},
        {"Name": "batch", "Namespaces": ["batch", "web"], "ShareIdleCPUsInSame": "package",
         "PreferSpreadingPods": True, "AllocatorPriority": "efficiency"},
        {"Name": "default", "ShareIdleCPUsInSame": "system", "MaxCPUs": 3},
    ],
    "per-namespace": [
        {"Name": "dataplane", "MatchExpressions": [{"key": "app", "operator": "In", "values": ["upf"]}],
         "PreferNewBalloons": True, "MaxBalloons": 4, "ShareIdleCPUsInSame": "l3cache"},
        {"Name": "batch", "Namespaces": ["batch", "web", "dpdk"], "PreferPerNamespaceBalloon": True,
         "ShareIdleCPUsInSame": "core", "MinCPUs": 2, "PinMemory": False},
        {"Name": "default", "MinBalloons": 2, "MaxBalloons": 3, "ShareIdleCPUsInSame": "numa"},
    ],
    "dedicated": [
        {"Name": "dedicated", "MatchExpressions": [{"key": "qosclass", "operator": "In", "values": ["Guaranteed"]}],
         "PreferNewBalloons": True},
        {"Name": "batch", "Namespaces": ["batch", "web"], "ShareIdleCPUsInSame": "numa", "MaxBalloons": 2},
    ],
}

TOPOLOGIES = {
    "multi-node": lambda: machine(packages=2, cores=4, nodes_per_package=2, interleaved=True),
    "l3-per-ccx": lambda: machine(packages=1, dies=2, cores=4, l3_cores=2, nodes_per_package=2),
    "hybrid": lambda: hybrid(4, 8),
}


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("types", sorted(TYPES))
@pytest.mark.parametrize("seed", range(8))
def test_random_sequences(topology, types, seed):
    make = make_factory(TOPOLOGIES[topology](), TYPES[types])
    stats = run_random(make, seed, steps=80)
    assert stats["created"] > 20


def test_random_sequences_hit_shortage_restarts_and_damage():
    # The generator must reach "no balloon can hold it" and both kinds of restart,
    # or the sequences above prove less than they seem to.
    make = make_factory(TOPOLOGIES["multi-node"](), TYPES["plain"])
    stats = [run_random(make, seed, steps=80) for seed in range(6)]
    assert sum(s["warned"] for s in stats) > 0
    assert sum(s["restarts"] for s in stats) > 0
    assert sum(s["damaged"] for s in stats) > 0
    assert sum(s.get("live", 0) for s in stats) > 0


@pytest.mark.parametrize("seed", range(3))
def test_random_sequences_512_cpus(seed):
    make = make_factory(machine(packages=2, cores=128, nodes_per_package=4, interleaved=True),
                        TYPES["hht-share"], reserved=2)
    stats = run_random(make, 100 + seed, steps=200, check_every=5)
    assert stats["created"] > 80
