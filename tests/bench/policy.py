"""Decision latency of the static and static-plus policies on a big machine.

A generated sysfs tree (2 sockets x 128 cores x 2 threads = 512 CPUs, 8 NUMA
nodes, 64 isolated CPUs) is discovered, then for each policy:

* create: 1000 containers are allocated one by one (a seeded mix of
  best-effort, burstable, fractional and integer Guaranteed ones, about one
  in eight getting exclusive CPUs), timing every decision;
* churn: with the 1000 containers alive, exclusive containers are created
  and removed again; each of these decisions moves the shared pool and so
  reports every shared container (the worst case);
* remove: all containers are released in random order.

    python -m tests.bench.policy [--containers N] [--seed S]

prints p50/p99/max wall-clock latency per phase and policy, and p50/p99 of
the deciding thread's CPU time (which a busy machine's preemption does not
inflate); `run()` returns the same as a dict.
"""

from __future__ import annotations

import argparse
import gc
import random
import tempfile
import time
from collections.abc import Iterable

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import generate

__all__ = ["build_topology", "run", "main"]

POLICIES = ("static", "static-plus")


def build_topology(sockets: int = 2, cores_per_die: int = 128, threads_per_core: int = 2,
                   numa_per_socket: int = 4, isolated: Iterable[int] = range(448, 512)) -> Topology:
    """Generate a sysfs tree in a temporary directory, discover it, remove the tree."""
    with tempfile.TemporaryDirectory(prefix="bench-policy-") as root:
        generate(root, sockets=sockets, cores_per_die=cores_per_die, threads_per_core=threads_per_core,
                 numa_per_socket=numa_per_socket, numbering="interleaved", isolated=isolated)
        return discover(root)


def _workloads(rng: random.Random, count: int, prefix: str) -> list[Workload]:
    out = []
    for i in range(count):
        roll = rng.random()
        if roll < 0.40:
            qos, cpu = QoS.BESTEFFORT, 0
        elif roll < 0.75:
            qos, cpu = QoS.BURSTABLE, rng.choice([100, 250, 500])
        elif roll < 0.875:
            qos, cpu = QoS.GUARANTEED, rng.choice([200, 500, 750])
        elif roll < 0.95:
            qos, cpu = QoS.GUARANTEED, 1000 * rng.choice([1, 1, 2, 4])  # exclusive in both
        else:
            qos, cpu = QoS.BURSTABLE, rng.choice([1500, 2500])  # static-plus: exclusive + shared
        key = f"{prefix}{i:05d}"
        out.append(Workload(key=key, namespace="bench", pod=f"pod-{key}", name=key, qos=qos,
                            cpu_request=cpu, system=rng.random() < 0.02))
    return out


def _stats(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    n = len(ordered)

    def pct(p: float) -> float:
        return ordered[min(n - 1, int(p * n))] / 1e6

    return {"n": n, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": ordered[-1] / 1e6,
            "mean_ms": sum(ordered) / n / 1e6}


def _bench_one(name: str, topology: Topology, containers: int, churn: int, seed: int,
               reserved: int | str) -> dict:
    ctx = build_context(topology, reserved=reserved)
    policy = default_registry().lookup(name).factory(ctx)
    rng = random.Random(seed)
    workloads = _workloads(rng, containers, "c")
    clock = time.perf_counter_ns
    cpu_clock = time.thread_time_ns
    create, remove, churn_ns = [], [], []
    cpu = {"create": [], "churn": [], "remove": []}
    others_sizes = []
    warnings = 0

    gc.disable()  # measure the policy, not the collector's timing luck
    try:
        for w in workloads:
            c0, t0 = cpu_clock(), clock()
            d = policy.allocate(w)
            create.append(clock() - t0)
            cpu["create"].append(cpu_clock() - c0)
            others_sizes.append(len(d.others))
            warnings += d.warning is not None
        exclusive_now = len([a for a in policy.assignments().values() if a.exclusive])

        extra = [Workload(key=f"x{i:05d}", namespace="bench", pod=f"px{i}", name="x",
                          qos=QoS.GUARANTEED, cpu_request=1000 * rng.choice([1, 2]),
                          prefer_isolated=False)
                 for i in range(churn)]
        for w in extra:
            c0, t0 = cpu_clock(), clock()
            d = policy.allocate(w)
            churn_ns.append(clock() - t0)
            cpu["churn"].append(cpu_clock() - c0)
            others_sizes.append(len(d.others))
            c0, t0 = cpu_clock(), clock()
            d = policy.release(w.key)
            churn_ns.append(clock() - t0)
            cpu["churn"].append(cpu_clock() - c0)
            others_sizes.append(len(d.others))

        for w in rng.sample(workloads, len(workloads)):
            c0, t0 = cpu_clock(), clock()
            d = policy.release(w.key)
            remove.append(clock() - t0)
            cpu["remove"].append(cpu_clock() - c0)
            others_sizes.append(len(d.others))
    finally:
        gc.enable()
    if policy.assignments():
        raise AssertionError(f"{name}: containers left after releasing all")
    return {
        "create": _stats(create),
        "churn": _stats(churn_ns),
        "remove": _stats(remove),
        # CPU time of the deciding thread: wall-clock tails on a busy machine
        # are mostly preemption, this shows the policy's own cost.
        "cpu": {phase: _stats(samples) for phase, samples in cpu.items()},
        "exclusive_containers": exclusive_now,
        "warnings": warnings,
        "max_others": max(others_sizes),
    }


def run(containers: int = 1000, churn: int = 200, seed: int = 1, reserved: int | str = 2,
        policies: Iterable[str] = POLICIES, topology: Topology | None = None) -> dict:
    """Benchmark the policies; returns {policy: {phase: {p50_ms, p99_ms, ...}}, "topology": ...}."""
    if topology is None:
        topology = build_topology()
    result: dict = {
        "topology": {"cpus": len(topology.online), "numa_nodes": len(topology.cpu_node_ids()),
                     "isolated": str(topology.isolated or CPUSet())},
        "containers": containers,
    }
    for name in policies:
        result[name] = _bench_one(name, topology, containers, churn, seed, reserved)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--churn", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    topology = build_topology()
    print(f"topology: {topology} (generated and discovered in {time.monotonic() - t0:.1f}s)")
    result = run(args.containers, args.churn, args.seed, topology=topology)
    for name in POLICIES:
        r = result[name]
        print(f"\n{name}: {result['containers']} containers, {r['exclusive_containers']} with exclusive "
              f"CPUs, {r['warnings']} warnings, largest others: {r['max_others']}")
        for phase in ("create", "churn", "remove"):
            s = r[phase]
            c = r["cpu"][phase]
            print(f"  {phase:<7} n={s['n']:<5} wall p50 {s['p50_ms']:.3f} ms  p99 {s['p99_ms']:.3f} ms  "
                  f"max {s['max_ms']:.3f} ms | cpu p50 {c['p50_ms']:.3f} ms  p99 {c['p99_ms']:.3f} ms")


if __name__ == "__main__":
    main()
