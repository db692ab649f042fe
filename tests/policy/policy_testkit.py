"""Helpers for the policy tests (a uniquely named module: conftest.py names clash across dirs)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cri_resmgr.policy.api import (
    Assignment,
    Decision,
    PolicyContext,
    PolicyError,
    QoS,
    Resources,
    Workload,
)
from cri_resmgr.policy.static import StaticPolicy, exclusive_cpus_wanted
from cri_resmgr.policy.static_plus import StaticPlusPolicy
from cri_resmgr.topology.cpuset import CPUSet, format_cpulist


def workload(key: str, qos: QoS | str = QoS.BESTEFFORT, cpu: int = 0, **kw) -> Workload:
    """A Workload named after its key; cpu is the request in milli-CPU."""
    return Workload(key=key, namespace=kw.pop("namespace", "default"), pod=f"pod-{key}", name=key,
                    qos=QoS(qos), cpu_request=cpu, **kw)


# -- invariant checking for random create/remove sequences ------------------------------


@dataclass
class Model:
    """What the test believes: the workloads alive, the resources last applied to each
    (updated only from decisions, as the engine would), and who got a warning."""

    context: PolicyContext
    workloads: dict = field(default_factory=dict)  # key -> Workload
    applied: dict = field(default_factory=dict)  # key -> Resources
    warned: set = field(default_factory=set)
    _mems: dict = field(default_factory=dict)

    def mems(self, cpus: CPUSet) -> str:
        key = cpus.as_frozenset()
        text = self._mems.get(key)
        if text is None:
            topo = self.context.topology
            text = self._mems[key] = format_cpulist({topo.node_of(c) for c in cpus})
        return text


def wanted_exclusive(policy, workload) -> int:
    """The exclusive CPU count the policy's rules promise (without shortage)."""
    if isinstance(policy, StaticPolicy):
        return exclusive_cpus_wanted(workload)
    reserved = policy.reserved
    if (workload.system or workload.prefer_reserved) and reserved:
        return 0
    if workload.prefer_shared is True:
        return 0
    return workload.cpu_request // 1000


def base_shared(policy, ctx: PolicyContext) -> CPUSet:
    if isinstance(policy, StaticPlusPolicy):
        return ctx.available - ctx.reserved - (ctx.topology.isolated & ctx.available)
    if policy.strict:
        return ctx.available - ctx.reserved
    return ctx.available


def check_invariants(policy, model: Model) -> None:
    """Everything that must hold between any two decisions."""
    ctx = model.context
    assignments = policy.assignments()
    assert set(assignments) == set(model.workloads) == set(model.applied)
    used = CPUSet()
    total = 0
    for a in assignments.values():
        total += len(a.exclusive)
        used = used | a.exclusive
    assert total == len(used), "exclusive sets overlap"
    assert used.isdisjoint(ctx.reserved), "reserved CPUs handed out as exclusive"
    assert used.issubset(ctx.available)
    shared = base_shared(policy, ctx) - used
    assert policy.shared == shared
    assert shared, "shared pool is empty"
    isolated = ctx.topology.isolated & ctx.available - ctx.reserved
    for key, a in assignments.items():
        w = model.workloads[key]
        if a.pool == "reserved":
            expected = ctx.reserved
            assert not a.exclusive and (w.system or w.prefer_reserved)
        elif a.pool == "shared":
            expected = shared | a.exclusive
            assert not a.exclusive or isinstance(policy, StaticPlusPolicy)
            assert a.exclusive.issubset(isolated) or a.exclusive.isdisjoint(isolated)
        else:
            assert a.pool in ("exclusive", "isolated") and a.exclusive
            expected = a.exclusive
            if a.pool == "isolated":
                assert a.exclusive.issubset(isolated)
            elif isinstance(policy, StaticPlusPolicy):  # static ignores isolcpus
                assert a.exclusive.isdisjoint(isolated)
        want = wanted_exclusive(policy, w)
        assert len(a.exclusive) == (0 if key in model.warned else want), (key, w, a)
        res = policy.resources(key)
        assert res == Resources(expected, model.mems(expected)), (key, a, res)
        assert model.applied[key] == res, f"{key}: applied {model.applied[key]} but policy says {res}"


def apply(policy, model: Model, decision: Decision, before: dict, subject: str) -> None:
    """Check that decision.others is exactly the set of changed containers; apply it."""
    after = {k: policy.resources(k) for k in before}
    changed = {k for k in before if k != subject and after[k] != before[k]}
    assert set(decision.others) == changed, (subject, set(decision.others) ^ changed)
    for key, res in decision.others.items():
        assert key != subject
        model.applied[key] = res


def random_workload(rng: random.Random, key: str):
    qos = rng.choice(["Guaranteed", "Guaranteed", "Burstable", "BestEffort"])
    if qos == "BestEffort":
        cpu = 0
    else:
        cpu = rng.choice([100, 500, 1000, 1000, 2000, 2500, 3000, 4000, 8000, 16000, 32000])
    return workload(
        key, qos, cpu,
        system=rng.random() < 0.05,
        prefer_reserved=rng.random() < 0.03,
        prefer_shared=rng.choice([None, None, None, None, True, False]),
        prefer_isolated=rng.choice([None, None, None, False, True]),
    )


def run_random(make_policy: Callable[[], object], ctx: PolicyContext, seed: int, steps: int,
               check_every: int = 1) -> dict:
    """A seeded random create/remove/restart sequence, checked after every step."""
    rng = random.Random(seed)
    policy = make_policy()
    model = Model(ctx)
    counter = 0
    stats = {"created": 0, "removed": 0, "warned": 0, "restarts": 0}

    def snapshot():
        return {k: policy.resources(k) for k in model.workloads}

    for step in range(steps):
        roll = rng.random()
        if model.workloads and roll < 0.35:
            key = rng.choice(sorted(model.workloads))
            before = snapshot()
            d = policy.release(key)
            assert d.resources is None
            del model.workloads[key], model.applied[key], before[key]
            model.warned.discard(key)
            apply(policy, model, d, before, key)
            stats["removed"] += 1
        elif model.workloads and roll < 0.37:
            # Restart: a fresh policy restored from the persisted state changes nothing.
            saved = policy.assignments()
            policy = make_policy()
            items = [(w, saved[k]) for k, w in model.workloads.items()]
            d = policy.restore(items)
            assert set(d.others) == set(model.workloads)
            restored = policy.assignments()
            replaced_any = bool(model.warned)
            for key in model.workloads:
                if key not in model.warned:
                    assert restored[key] == saved[key], f"{key}: valid assignment not kept"
                elif restored[key].exclusive:
                    model.warned.discard(key)  # placed anew, and now there was room
            if not replaced_any:
                assert d.others == model.applied  # nothing re-placed: nothing moves
            model.applied.update(d.others)
            stats["restarts"] += 1
        elif model.workloads and roll < 0.39:
            # Restart from damaged state: exclusive sets moved to other containers,
            # some assignments lost, some made up. Whatever survives must be sane.
            saved = policy.assignments()
            keys = sorted(saved)
            damaged = {}
            for key in keys:
                pick = rng.random()
                if pick < 0.2:
                    damaged[key] = None
                elif pick < 0.5:
                    damaged[key] = saved[rng.choice(keys)]
                elif pick < 0.6:
                    cpus = rng.sample(sorted(ctx.topology.online), rng.randint(1, 4))
                    damaged[key] = Assignment(rng.choice(["shared", "exclusive", "isolated", "reserved"]),
                                              CPUSet(cpus))
                else:
                    damaged[key] = saved[key]
            policy = make_policy()
            d = policy.restore([(model.workloads[k], damaged[k]) for k in keys])
            assert set(d.others) == set(keys)
            restored = policy.assignments()
            for key in keys:
                a = damaged[key]
                if a is not None and a.exclusive and restored[key].exclusive == a.exclusive:
                    assert restored[key] == a
            model.warned = {k for k in keys
                            if len(restored[k].exclusive) != wanted_exclusive(policy, model.workloads[k])}
            model.applied = dict(d.others)
            stats["restarts"] += 1
        elif model.workloads and roll < 0.40:
            key = rng.choice(sorted(model.workloads))
            try:
                policy.allocate(model.workloads[key])
            except PolicyError:
                pass
            else:
                raise AssertionError("allocate of a known key must fail")
        else:
            counter += 1
            w = random_workload(rng, f"c{counter}")
            before = snapshot()
            d = policy.allocate(w)
            model.workloads[w.key] = w
            model.applied[w.key] = d.resources
            if d.warning:
                model.warned.add(w.key)
                stats["warned"] += 1
            apply(policy, model, d, before, w.key)
            stats["created"] += 1
        if step % check_every == 0:
            check_invariants(policy, model)

    for key in rng.sample(sorted(model.workloads), len(model.workloads)):
        before = snapshot()
        d = policy.release(key)
        del model.workloads[key], model.applied[key], before[key]
        model.warned.discard(key)
        apply(policy, model, d, before, key)
    check_invariants(policy, model)
    assert dict(policy.assignments()) == {}
    assert policy.shared == base_shared(policy, ctx), "CPUs leaked"
    return stats
