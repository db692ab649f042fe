"""Seeded random create/resize/release sequences of the balloons policy: after every step
the invariant checker (balloons_testkit.check_invariants), every container whose cpuset a
resize changed is in its decision's `others`, and a refused resize leaves everything as
it was (balloons, empty ones and their names included, the free CPUs, every container's
cpuset), so that the engine, told nothing, still holds what the policy holds."""

from __future__ import annotations

import dataclasses
import random

import pytest
from balloons_testkit import Model, check_invariants, make_factory, random_workload
from test_balloons_random import TOPOLOGIES, TYPES

from cri_resmgr.policy.api import QoS, ResizeError
from cri_resmgr.policy.balloons import BalloonsPolicy

SIZES = [100, 500, 1000, 1500, 2000, 3000, 4000, 6000, 12000]


def state(p: BalloonsPolicy, keys) -> tuple:
    return ({k: p.resources(k) for k in keys}, dict(p.assignments()),
            sorted((b.name, b.cpus, b.requested) for b in p.balloons()), p.free)


def run(make, seed: int, steps: int) -> dict:
    rng = random.Random(seed)
    p = make()
    model = Model()
    pods: list[tuple[str, str]] = []
    stats = {"resized": 0, "refused": 0}
    n = 0
    for step in range(steps):
        roll = rng.random()
        if model.workloads and roll < 0.2:
            key = rng.choice(sorted(model.workloads))
            d = p.release(key)
            del model.workloads[key], model.applied[key]
            model.applied.update(d.others)
        elif model.workloads and roll < 0.6:
            key = rng.choice(sorted(model.workloads))
            old = model.workloads[key]
            if old.qos is QoS.BESTEFFORT:
                continue
            cpu = rng.choice(SIZES)
            w = dataclasses.replace(old, cpu_request=cpu,
                                    cpu_limit=cpu if old.qos is QoS.GUARANTEED else old.cpu_limit)
            before = state(p, model.workloads)
            try:
                d = p.resize(w)
            except ResizeError:
                assert state(p, model.workloads) == before, (seed, step, key, cpu)
                stats["refused"] += 1
                continue
            changed = {k for k in model.workloads if k != key and p.resources(k) != before[0][k]}
            assert changed <= set(d.others), (seed, step, key, changed - set(d.others))
            model.workloads[key] = w
            model.applied[key] = d.resources
            model.applied.update(d.others)
            stats["resized"] += 1
        else:
            n += 1
            w = random_workload(rng, f"c{n}", pods)
            d = p.allocate(w)
            model.workloads[w.key] = w
            model.applied[w.key] = d.resources
            model.applied.update(d.others)
        check_invariants(p, model)
    return stats


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("types", sorted(TYPES))
@pytest.mark.parametrize("seed", range(6))
def test_random_resizes(topology, types, seed):
    stats = run(make_factory(TOPOLOGIES[topology](), TYPES[types]), seed, steps=150)
    assert stats["resized"] > 5


def test_random_resizes_hit_refusals():
    # Refusals must happen, or the sequences above prove less than they seem to.
    make = make_factory(TOPOLOGIES["multi-node"](), TYPES["hht-share"])
    assert sum(run(make, seed, steps=100)["refused"] for seed in range(6)) > 0
