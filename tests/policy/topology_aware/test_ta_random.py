"""Seeded random create/remove/restart sequences with the invariant checker after each step."""

from __future__ import annotations

import pytest
from ta_testkit import make, run_random

from tests.harness.sysfs import fake_topology
from tests.topology.shapes import SHAPES

TOPOLOGIES = {
    "2s-2n-pmem": lambda: fake_topology(sockets=2, cores_per_die=4, numa_per_socket=2, memory_only_nodes=2,
                                       isolated=[13, 14]),
    "1s-1n": lambda: fake_topology(sockets=1, cores_per_die=3),
    "4s-interleaved": lambda: fake_topology(sockets=4, cores_per_die=4, numa_per_socket=2, numbering="interleaved"),
    "l3-per-ccx": SHAPES["l3-per-ccx"],
    "node-spans-packages": SHAPES["node-spans-packages"],
    "pkgs-per-node": SHAPES["pkgs-per-node"],
    "hybrid": SHAPES["hybrid"],
}
CONFIGS = {
    "default": {"reserved": 1},
    "noreserved": {},
    "reserved-cpuset-noisolated": {"reserved": "cpuset:0-1", "PreferIsolatedCPUs": False},
    "nopin-memory": {"reserved": 1, "PinMemory": False},
    "prefer-shared-colocate": {"reserved": 1, "PreferSharedCPUs": True, "ColocatePods": True},
    "colocate-ns": {"reserved": 1, "ColocateNamespaces": True},
    # The policy's own default level for Burstable containers without a CPU limit.
    "unlimited-burstable-package": {"reserved": 1, "UnlimitedBurstable": "package"},
    "unlimited-burstable-system": {"UnlimitedBurstable": "system"},
}


@pytest.mark.parametrize("topo", sorted(TOPOLOGIES))
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_random_sequences(topo, config, seed):
    topology = TOPOLOGIES[topo]()
    stats = run_random(lambda: make(topology, **CONFIGS[config]), seed, steps=80)
    assert stats["created"] > 20


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_big_machine(seed):
    topology = fake_topology(sockets=2, cores_per_die=64, numa_per_socket=4, numbering="interleaved",
                             memory_only_nodes=2, isolated=range(200, 216))
    stats = run_random(lambda: make(topology, reserved=2), 100 + seed, steps=200, check_every=5)
    assert stats["exclusive"] > 20


def test_random_sequences_hit_shortage_and_refusal_paths():
    topology = TOPOLOGIES["1s-1n"]()
    stats = [run_random(lambda: make(topology, reserved=1), seed, steps=80) for seed in range(8)]
    assert sum(s["warned"] for s in stats) > 0
    assert sum(s["restarts"] for s in stats) > 0
    assert sum(s["exclusive"] for s in stats) > 0


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_random_sequences_every_machine_class(shape):
    topology = SHAPES[shape]()
    big = len(topology.online) > 64
    stats = run_random(lambda: make(topology, reserved=1), 7, steps=150 if big else 80,
                       check_every=5 if big else 1)
    assert stats["created"] > 20
