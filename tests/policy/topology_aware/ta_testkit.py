"""Helpers for the topology-aware policy tests (a uniquely named module)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cri_resmgr.policy.api import Assignment, Decision, PolicyError, QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.topology_aware.classes import CPUClass
from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet

PREFIX = "cri-resource-manager.intel.com/"
GiB = 1 << 30


def wl(key: str, qos: QoS | str = QoS.BESTEFFORT, cpu: int = 0, *, namespace: str = "default",
       pod: str | None = None, labels: dict | None = None, annotations: dict | None = None,
       **kw) -> Workload:
    """A Workload named after its key; cpu in milli-CPU; annotations without the prefix."""
    ann = {PREFIX + k: v for k, v in (annotations or {}).items()}
    if QoS(qos) is QoS.BURSTABLE and "memory_limit" not in kw:
        # A memory limit that any node holds: a Burstable container without one gets every
        # node's memory (as in the references), which most tests are not about.
        kw["memory_limit"] = max(kw.get("memory_request") or 0, GiB)
    return Workload(key=key, namespace=namespace, pod=pod or f"pod-{key}", name=key, qos=QoS(qos),
                    cpu_request=cpu, labels=labels or {}, pod_annotations=ann, **kw)


def make(topology: Topology, reserved=None, available=None, clock=None, **options) -> TopologyAwarePolicy:
    # Most tests use Burstable containers as plain shared ones: no level for those without
    # a CPU limit unless a test asks for one (the policy's default is package).
    options.setdefault("UnlimitedBurstable", "none")
    ctx = build_context(topology, reserved=reserved, available=available, options=options)
    return TopologyAwarePolicy(ctx, clock=clock) if clock else TopologyAwarePolicy(ctx)


# -- invariants ---------------------------------------------------------------------------


@dataclass
class Model:
    """What the engine would believe: the workloads alive and the resources last applied."""

    workloads: dict = field(default_factory=dict)
    applied: dict = field(default_factory=dict)


def check_invariants(policy: TopologyAwarePolicy, model: Model) -> None:
    book, tree = policy.book, policy.tree
    topo = policy._topology
    assignments = policy.assignments()
    assert set(assignments) == set(model.workloads) == set(model.applied)
    used_total, used = 0, CPUSet()
    for a in assignments.values():
        used_total += len(a.exclusive)
        used = used | a.exclusive
    assert used_total == len(used), "a CPU is exclusive twice"
    assert used.isdisjoint(policy.reserved), "reserved CPUs given out as exclusive"
    assert used == book.used | book.used_isolated
    # Pool accounting adds up.
    milli = dict.fromkeys(tree.pools, 0)
    parts = dict.fromkeys(tree.pools, 0)
    for m in book.members.values():
        if m.pool is not None and m.shared_part:
            for p in m.pool.lineage():
                milli[p] += m.request.shared_milli
                parts[p] += 1
    assert milli == book.milli and parts == book.parts
    for pool in tree.pools:
        assert book.shared[pool] == pool.sharable - book.used
    assert book.shared[tree.root], "the root pool has no shared CPU left"
    for key in assignments:
        m = book.members[key]
        res = policy.resources(key)
        assert model.applied[key] == res, f"{key}: applied {model.applied[key]} but policy says {res}"
        cpus = res.cpuset_cpus
        assert cpus, key
        if m.pool is None:
            assert cpus == policy.reserved and m.cls is CPUClass.RESERVED
        else:
            assert cpus.issubset(m.pool.cpus), f"{key}: {cpus} outside its pool {m.pool}"
            if m.shared_part:
                # No shared container on an exclusive CPU (other than its own).
                assert (cpus - m.exclusive).isdisjoint(used), f"{key} shares an exclusive CPU"
                assert (cpus - m.exclusive) == book.shared[m.pool]
            else:
                assert cpus == m.exclusive
            assert len(m.exclusive) == m.request.exclusive
        if res.cpuset_mems is not None and "dram" in m.kinds:
            mems = {int(x) for x in CPUSet.parse(res.cpuset_mems)}
            from cri_resmgr.policy.pools import memory_nodes
            dram = memory_nodes(topo)
            need = set().union(*(dram[topo.node_of(c)] for c in cpus))
            assert need <= mems, f"{key}: mems {res.cpuset_mems} do not cover its CPUs' nodes {need}"


def apply(policy, model: Model, decision: Decision, before: dict, subject: str | None) -> None:
    """decision.others must be exactly the containers whose resources changed."""
    after = {k: policy.resources(k) for k in before}
    changed = {k for k in before if k != subject and after[k] != before[k]}
    assert set(decision.others) - {subject} == changed, (subject, set(decision.others) ^ changed)
    model.applied.update(decision.others)


def random_workload(rng: random.Random, key: str) -> Workload:
    qos = rng.choice(["Guaranteed", "Guaranteed", "Burstable", "BestEffort"])
    cpu = 0 if qos == "BestEffort" else rng.choice([100, 500, 1000, 1000, 2000, 2500, 3000, 4000, 8000])
    ann = {}
    roll = rng.random()
    if roll < 0.1:
        ann["memory-type"] = rng.choice(["pmem", "dram,pmem", "hbm", "dram"])
    elif roll < 0.15:
        ann["affinity"] = "- match: {key: app, operator: Equals, values: [a]}"
    elif roll < 0.2:
        ann["anti-affinity"] = "- match: {key: app, operator: Equals, values: [b]}"
    elif roll < 0.23 and qos == "Burstable":
        ann["unlimited-burstable"] = rng.choice(["package", "true", "node"])
    limits = {}
    if qos == "Burstable":  # CPU and memory limits, or none (the references place by them)
        limits = {"cpu_limit": rng.choice([None, cpu, 2 * cpu, 6000]),
                  "memory_limit": rng.choice([None, GiB, 8 * GiB])}
    return wl(key, qos, cpu, namespace=rng.choice(["default", "default", "shop"]),
              labels={"app": rng.choice(["a", "b", "c"])}, annotations=ann, **limits,
              memory_request=rng.choice([0, 0, GiB, 4 * GiB]),
              system=rng.random() < 0.05, prefer_shared=rng.choice([None, None, None, True]),
              prefer_isolated=rng.choice([None, None, False, True]))


def run_random(make_policy: Callable[[], TopologyAwarePolicy], seed: int, steps: int,
               check_every: int = 1) -> dict:
    rng = random.Random(seed)
    policy = make_policy()
    model = Model()
    stats = {"created": 0, "removed": 0, "warned": 0, "restarts": 0, "refused": 0, "exclusive": 0}

    def snapshot() -> dict:
        return {k: policy.resources(k) for k in model.workloads}

    for step in range(steps):
        roll = rng.random()
        if model.workloads and roll < 0.35:
            key = rng.choice(sorted(model.workloads))
            before = snapshot()
            d = policy.release(key)
            del model.workloads[key], model.applied[key], before[key]
            apply(policy, model, d, before, None)
            stats["removed"] += 1
        elif model.workloads and roll < 0.38:
            saved = policy.assignments()
            policy = make_policy()
            d = policy.restore([(w, saved[k]) for k, w in model.workloads.items()])
            assert set(d.others) == set(model.workloads)
            restored = policy.assignments()
            for key in model.workloads:
                if saved[key].exclusive or not stats["warned"]:
                    assert restored[key] == saved[key], f"{key}: valid assignment not kept"
            model.applied = dict(d.others)
            stats["restarts"] += 1
        elif model.workloads and roll < 0.40:
            # Damaged state: swapped and made-up assignments; whatever is kept must be sane.
            saved = policy.assignments()
            keys = sorted(saved)
            damaged: dict[str, Assignment | None] = {}
            for key in keys:
                pick = rng.random()
                if pick < 0.2:
                    damaged[key] = None
                elif pick < 0.5:
                    damaged[key] = saved[rng.choice(keys)]
                elif pick < 0.6:
                    cpus = rng.sample(sorted(policy._topology.online), rng.randint(1, 4))
                    damaged[key] = Assignment(rng.choice(["root", "node0", "reserved"]), CPUSet(cpus),
                                              {"class": rng.choice(["shared", "exclusive"])})
                else:
                    damaged[key] = saved[key]
            fresh = make_policy()
            try:
                d = fresh.restore([(model.workloads[k], damaged[k]) for k in keys])
            except PolicyError:
                stats["refused"] += 1
            else:
                policy = fresh
                model.applied = dict(d.others)
            stats["restarts"] += 1
        elif model.workloads and roll < 0.41:
            key = rng.choice(sorted(model.workloads))
            try:
                policy.allocate(model.workloads[key])
            except PolicyError:
                pass
            else:
                raise AssertionError("allocate of a known key must fail")
        else:
            w = random_workload(rng, f"c{stats['created'] + 1}")
            # kubelet admits only what the node's allocatable CPU holds.
            capacity = 1000 * len(policy.tree.root.sharable)
            if sum(x.cpu_request for x in model.workloads.values()) + w.cpu_request > capacity:
                continue
            stats["created"] += 1
            before = snapshot()
            d = policy.allocate(w)
            model.workloads[w.key] = w
            model.applied[w.key] = d.resources
            if d.warning:
                stats["warned"] += 1
                stats.setdefault("warnings", []).append(d.warning)
            if policy.assignment(w.key).exclusive:
                stats["exclusive"] += 1
            apply(policy, model, d, before, w.key)
        if step % check_every == 0:
            check_invariants(policy, model)
    for key in rng.sample(sorted(model.workloads), len(model.workloads)):
        before = snapshot()
        d = policy.release(key)
        del model.workloads[key], model.applied[key], before[key]
        apply(policy, model, d, before, None)
    check_invariants(policy, model)
    assert not policy.assignments()
    assert all(policy.book.shared[p] == p.sharable for p in policy.tree.pools), "CPUs leaked"
    assert all(v == 0 for v in policy.book.memory.values()), "memory accounting leaked"
    return stats
