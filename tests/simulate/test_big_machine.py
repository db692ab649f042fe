"""The big machine's figure as a test of correctness: 4096 sparse CPUs, 16 NUMA nodes,
1,000 containers created and deleted (some 500 alive at a time), every registered policy,
the invariant checker after every call. The same churn with 10,000 containers, and its
times, is `make bench`'s big-machine section (tests/bench/big_machine.py), which fails on
a checker violation too."""

from __future__ import annotations

import pytest

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.shape import topology_of

POLICIES = [p.name for p in default_registry() if p.factory is not None]
CONTAINERS = 1000


@pytest.fixture(scope="module")
def machine():
    return topology_of("8s/16n/256c/2t/sparse")


@pytest.fixture(scope="module")
def workload():
    return churn_calls(CONTAINERS, seed=1, target=512)


@pytest.mark.parametrize("policy", POLICIES)
def test_4096_sparse_cpus_1000_containers(machine, workload, policy):
    assert len(machine.online) == 4096 and len(machine.cpu_node_ids()) == 16
    o = simulate(workload, machine, Config(PolicyConfig(reserved_cpu=8)), policy, default_registry(),
                 keep_steps=False)
    assert o.checker.count == 0, o.checker.violations
    assert o.policy_errors == 0 and o.messages == []
    created = sum(1 for c in workload if c.method == "CreateContainer")
    assert created == CONTAINERS and len(o.decision_ns) >= created
    released = sum(1 for c in o.cache if c.released) + created - len(list(o.cache))
    assert released > 300  # the churn deleted pods as it went, not only created
    alive = [c for c in o.cache if not c.released]
    assert len(alive) == len(o.policy.assignments()) > 300
