"""Seeded random create/remove/restart sequences with an invariant check after every step."""

from __future__ import annotations

import pytest
from policy_testkit import run_random

from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.static import StaticPolicy
from cri_resmgr.policy.static_plus import StaticPlusPolicy


@pytest.fixture(scope="module")
def small_topology(tmp_path_factory):
    from cri_resmgr.topology import discover
    from tests.harness.sysfs import generate

    root = tmp_path_factory.mktemp("smallhost")
    # 2 sockets x 3 cores x 2 threads, interleaved ids, CPUs 5 and 11 isolated.
    generate(root, sockets=2, cores_per_die=3, threads_per_core=2, numbering="interleaved",
             isolated=[5, 11])
    return discover(root)


CONFIGS = {
    # name: (policy class, reserved, options)
    "static": (StaticPolicy, 2, {}),
    "static-strict": (StaticPolicy, "cpuset:0-3", {"StrictReservation": True}),
    "static-noreserved": (StaticPolicy, None, {}),
    "static-plus": (StaticPlusPolicy, 2, {}),
    "static-plus-noreserved": (StaticPlusPolicy, None, {}),
}


def _factory(topology, config):
    cls, reserved, options = CONFIGS[config]
    ctx = build_context(topology, reserved=reserved, options=options)
    return ctx, lambda: cls(ctx)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_small_machine(small_topology, config, seed):
    ctx, make = _factory(small_topology, config)
    run_random(make, ctx, seed, steps=60)


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_big_machine(big_topology, config, seed):
    assert len(big_topology.online) == 256 and len(big_topology.cpu_node_ids()) == 8
    ctx, make = _factory(big_topology, config)
    stats = run_random(make, ctx, 1000 + seed, steps=150, check_every=3)
    assert stats["created"] > 50


def test_random_sequences_hit_the_shortage_path(small_topology):
    # The generator must actually exercise "not enough CPUs": otherwise the
    # sequences above would prove less than they seem to.
    ctx, make = _factory(small_topology, "static-plus")
    stats = [run_random(make, ctx, seed, steps=60) for seed in range(5)]
    assert sum(s["warned"] for s in stats) > 0
    assert sum(s["restarts"] for s in stats) > 0
