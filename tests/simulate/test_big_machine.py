"""The issue's figure as a test of correctness (its time goes to docs/simulate.md, not
into an assertion): 4096 sparse CPUs, 16 NUMA nodes, 10,000 containers created and
deleted, every registered policy, the invariant checker on after every call."""

from __future__ import annotations

import pytest

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.shape import topology_of

POLICIES = [p.name for p in default_registry() if p.factory is not None]


@pytest.fixture(scope="module")
def machine():
    return topology_of("8s/16n/256c/2t/sparse")


@pytest.fixture(scope="module")
def workload():
    return churn_calls(10_000, seed=1, target=2048)


@pytest.mark.parametrize("policy", POLICIES)
def test_4096_sparse_cpus_10000_containers(machine, workload, policy):
    assert len(machine.online) == 4096 and len(machine.cpu_node_ids()) == 16
    o = simulate(workload, machine, Config(PolicyConfig(reserved_cpu=8)), policy, default_registry(),
                 keep_steps=False)
    assert o.checker.count == 0, o.checker.violations
    assert o.policy_errors == 0 and o.messages == []
    created = sum(1 for c in workload if c.method == "CreateContainer")
    assert created == 10_000 and len(o.decision_ns) >= created
    alive = [c for c in o.cache if not c.released]
    assert len(alive) == len(o.policy.assignments()) > 1000
