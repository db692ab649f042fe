"""Helpers for the balloons policy tests: topologies, workloads, and the invariant checker
for random create/remove/restart sequences (a uniquely named module)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from cri_resmgr.policy.api import Assignment, PolicyError, QoS, Resources, Workload
from cri_resmgr.policy.balloons import BalloonsPolicy
from cri_resmgr.policy.balloons.assign import ANNOTATION, type_for
from cri_resmgr.policy.balloons.idle import share_region
from cri_resmgr.policy.balloons.types import RESERVED
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.pools import MemsOf
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet
from tests.topology.shapes import machine


def hybrid(p_cores: int = 4, e_cores: int = 8) -> Topology:
    """A hybrid part: 2-thread P-cores then single-thread E-cores, with the kinds the
    hardware model reads from cpu_core/cpu_atom."""
    t = machine(cores=p_cores, e_cores=e_cores)
    infos = [replace(i, kind="performance" if len(i.siblings) > 1 else "efficiency") for i in t.cpus.values()]
    return Topology(infos, t.nodes.values())


def wl(key: str, cpu: int = 0, namespace: str = "default", pod: str | None = None, **kw) -> Workload:
    qos = kw.pop("qos", QoS.BURSTABLE if cpu else QoS.BESTEFFORT)
    return Workload(key=key, namespace=namespace, pod=pod or f"pod-{key}", name=kw.pop("name", key),
                    qos=qos, cpu_request=cpu, **kw)


def annotated(key: str, balloon_type: str, cpu: int = 0, namespace: str = "default", **kw) -> Workload:
    return wl(key, cpu, namespace, pod_annotations={ANNOTATION: balloon_type}, **kw)


def policy(topology: Topology, types: list[dict], reserved: object = 1, **options) -> BalloonsPolicy:
    ctx = build_context(topology, reserved=reserved, options={"BalloonTypes": types, **options})
    return BalloonsPolicy(ctx)


def by_name(p: BalloonsPolicy) -> dict[str, object]:
    return {b.name: b for b in p.balloons()}


# -- invariants ---------------------------------------------------------------------------


@dataclass
class Model:
    workloads: dict = field(default_factory=dict)  # key -> Workload
    applied: dict = field(default_factory=dict)  # key -> Resources, as the engine would have them


def check_invariants(p: BalloonsPolicy, model: Model) -> None:
    book = p.book
    assert set(p.assignments()) == set(model.workloads) == set(model.applied)
    owned = CPUSet()
    total = 0
    for b in p.balloons():
        total += len(b.cpus)
        owned = owned | b.cpus
    assert total == len(owned), "balloons overlap"
    assert owned.isdisjoint(book.free), "a free (idle) CPU is also in a balloon"
    assert owned | book.free == book.assignable | book.reserved, "CPUs leaked or invented"
    mems = MemsOf(book.near.topology)
    for t in book.config.types:
        mine = book.by_type[t.name]
        if t.name == RESERVED:
            assert len(mine) == (1 if book.reserved else 0)
            continue
        assert len(mine) >= t.min_balloons, f"{t.name}: fewer than MinBalloons"
        assert t.max_balloons is None or len(mine) <= t.max_balloons, f"{t.name}: more than MaxBalloons"
        for b in mine:
            size = book.size(b)
            assert size >= t.min_cpus, f"{b.name}: {size} below MinCPUs"
            assert t.max_cpus is None or size <= t.max_cpus, f"{b.name}: {size} above MaxCPUs"
            target = book.target(b)
            assert size == target or (size < target and book.free_units(t) == 0), \
                f"{b.name}: size {size}, target {target}, free {book.free}"
            if t.hide_hyperthreads:
                assert book.near.whole_cores(b.cpus) == b.cpus, f"{b.name}: not whole cores"
            if b.members:
                assert b.cpus or book.free_units(t) == 0, f"{b.name} has containers but no CPUs"
    for b in p.balloons():
        assert b.requested == sum(w.cpu_request for w in b.members.values())
        region = share_region(book.near, b, book.assignable)
        lent = book.free & region
        own = b.cpus
        if b.type.hide_hyperthreads:
            own, lent = book.near.hide_hyperthreads(own), book.near.hide_hyperthreads(lent)
        visible = own | lent
        if not visible and b.members:
            visible = book.reserved or book.free or book.assignable  # no CPU of its own: best-effort
        for key, w in b.members.items():
            t, _ = type_for(book.config, w, bool(book.reserved))
            # Its own type's balloon, or the default one when none of its type could be made.
            assert b.type.name in (t.name, "default"), (key, t.name, b.name)
            res = p.resources(key)
            want = Resources(visible, mems(visible) if b.type.pin_memory else None)
            assert res == want, (key, b.name, res, want)
            assert model.applied[key] == res, f"{key}: applied {model.applied[key]} but policy says {res}"


# -- random sequences ------------------------------------------------------------------------

NAMESPACES = ["dpdk", "batch", "default", "kube-system", "web", "web"]
TYPES = ["dataplane", "batch", "default", "reserved", "nosuchtype"]


def random_workload(rng: random.Random, key: str, pods: list[tuple[str, str]]) -> Workload:
    if pods and rng.random() < 0.3:
        ns, pod = rng.choice(pods)
    else:
        ns, pod = rng.choice(NAMESPACES), f"pod-{key}"
        pods.append((ns, pod))
    cpu = rng.choice([0, 0, 100, 500, 1000, 1500, 2000, 3000, 4000])
    kw: dict = {}
    if cpu and rng.random() < 0.4:
        kw["qos"] = QoS.GUARANTEED  # whole CPUs in a PreferNewBalloons type: dedicated
    if rng.random() < 0.15:
        kw["pod_annotations"] = {ANNOTATION: rng.choice(TYPES)}
    return wl(key, cpu, ns, pod=pod, labels={"app": rng.choice(["upf", "db", "web"])}, **kw)


def apply(p: BalloonsPolicy, model: Model, decision, before: dict, subject: str) -> None:
    """decision.others must be exactly the containers (but the subject) whose resources changed."""
    after = {k: p.resources(k) for k in before}
    changed = {k for k in before if k != subject and after[k] != before[k]}
    assert set(decision.others) == changed, (subject, set(decision.others) ^ changed)
    for key, res in decision.others.items():
        model.applied[key] = res


def run_random(make, seed: int, steps: int, check_every: int = 1) -> dict:
    rng = random.Random(seed)
    p = make()
    model = Model()
    pods: list[tuple[str, str]] = []
    stats = {"created": 0, "removed": 0, "warned": 0, "restarts": 0, "damaged": 0}
    counter = 0
    for step in range(steps):
        roll = rng.random()
        if model.workloads and roll < 0.33:
            key = rng.choice(sorted(model.workloads))
            before = {k: p.resources(k) for k in model.workloads if k != key}
            d = p.release(key)
            del model.workloads[key], model.applied[key]
            apply(p, model, d, before, key)
            stats["removed"] += 1
        elif model.workloads and roll < 0.36:
            saved = {k: Assignment.from_json(a.to_json()) for k, a in p.assignments().items()}
            p = make()
            d = p.restore([(w, saved[k]) for k, w in model.workloads.items()])
            assert set(d.others) == set(model.workloads)
            assert dict(p.assignments()) == saved, diff(dict(p.assignments()), saved)
            # Balloons keep their CPUs; empty balloons (MinBalloons) are not persisted and may
            # be remade elsewhere, so only the idle CPUs lent to a balloon may differ.
            for key, res in d.others.items():
                own = CPUSet.parse(saved[key].details["cpus"])
                old = model.applied[key].cpuset_cpus
                if p.balloon_of(key).type.share_idle is None:
                    assert res == model.applied[key], (key, res, model.applied[key])
                else:
                    assert (res.cpuset_cpus & own) == (old & own), (key, res, old)
            model.applied = dict(d.others)
            stats["restarts"] += 1
        elif model.workloads and roll < 0.38:
            saved = {k: Assignment.from_json(a.to_json()) for k, a in p.assignments().items()}  # from a file
            keys = sorted(saved)
            damaged = {}
            for key in keys:
                pick = rng.random()
                if pick < 0.2:
                    damaged[key] = None
                elif pick < 0.4:
                    damaged[key] = saved[rng.choice(keys)]
                elif pick < 0.5:
                    cpus = rng.sample(sorted(p.book.near.topology.online), rng.randint(1, 4))
                    name = rng.choice(["batch[0]", "dataplane[3]", "default[0]", "bogus"])
                    damaged[key] = Assignment(name, details={"balloon": name, "type": name.split("[")[0],
                                                             "cpus": str(CPUSet(cpus))})
                else:
                    damaged[key] = saved[key]
            p = make()
            d = p.restore([(model.workloads[k], damaged[k]) for k in keys])
            assert set(d.others) == set(keys)
            model.applied = dict(d.others)
            stats["damaged"] += 1
        elif model.workloads and roll < 0.40:
            # Live reconfiguration to the same configuration: accepted, and nothing moves.
            live = dict(p.assignments())
            p = make()
            d = p.restore([(w, live[k]) for k, w in model.workloads.items()], live=True)
            assert {k: a.details["cpus"] for k, a in p.assignments().items()} == \
                {k: a.details["cpus"] for k, a in live.items()}
            model.applied = dict(d.others)
            stats["live"] = stats.get("live", 0) + 1
        elif model.workloads and roll < 0.41:
            key = rng.choice(sorted(model.workloads))
            try:
                p.allocate(model.workloads[key])
            except PolicyError:
                pass
            else:
                raise AssertionError("allocate of a known key must fail")
        else:
            counter += 1
            w = random_workload(rng, f"c{counter}", pods)
            before = {k: p.resources(k) for k in model.workloads}
            d = p.allocate(w)
            assert d.resources is not None and d.resources.cpuset_cpus
            model.workloads[w.key] = w
            model.applied[w.key] = d.resources
            if d.warning:
                stats["warned"] += 1
            apply(p, model, d, before, w.key)
            stats["created"] += 1
        if step % check_every == 0:
            check_invariants(p, model)
    for key in rng.sample(sorted(model.workloads), len(model.workloads)):
        before = {k: p.resources(k) for k in model.workloads if k != key}
        d = p.release(key)
        del model.workloads[key], model.applied[key]
        apply(p, model, d, before, key)
    check_invariants(p, model)
    assert dict(p.assignments()) == {}
    return stats


def make_factory(topology: Topology, types: list[dict], reserved: object = 1, **options):
    ctx = build_context(topology, reserved=reserved, options={"BalloonTypes": types, **options})
    return lambda: BalloonsPolicy(ctx)


def diff(a: dict, b: dict) -> dict:
    return {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
