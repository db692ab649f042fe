"""Decision latency of the policies on a big machine, through the simulator's engine path.

A generated sysfs tree (2 sockets x 128 cores x 2 threads = 512 CPUs, 8 NUMA
nodes, 64 isolated CPUs) is discovered, then for each policy the CRI calls
kubelet would make are run through `cri-resmgr simulate`'s path
(cri_resmgr/simulate/engine.py: the policy built through the registry and the
configuration, the engine's interceptors classifying each CreateContainer), so
what is timed is what the relay decides:

* create: 1000 pods with one container each are started (a seeded mix of
  best-effort, burstable, fractional and integer Guaranteed ones, about one
  in eight getting exclusive CPUs), timing every decision;
* churn: with the 1000 containers alive, exclusive containers are created
  and deleted again; each of these decisions moves the shared pool and so
  reports every shared container (the worst case);
* remove: all pods are deleted in random order.

    python -m tests.bench.policy [--containers N] [--seed S]

prints p50/p99/max wall-clock latency of the policy's decisions per phase and
policy, and p50/p99 of the deciding thread's CPU time (which a busy machine's
preemption does not inflate); `run()` returns the same as a dict.
"""

from __future__ import annotations

import argparse
import gc
import random
import tempfile
import time
from collections.abc import Iterable

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.calls import Call
from cri_resmgr.simulate.engine import Outcome, simulate
from cri_resmgr.simulate.podcalls import Container, Ids, Pod, Started, delete_calls, start_calls
from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import generate

__all__ = ["build_topology", "run", "main"]

POLICIES = ("static", "static-plus")
MIB = 1 << 20
PHASES = ("create", "churn", "remove")


def build_topology(sockets: int = 2, cores_per_die: int = 128, threads_per_core: int = 2,
                   numa_per_socket: int = 4, isolated: Iterable[int] = range(448, 512)) -> Topology:
    """Generate a sysfs tree in a temporary directory, discover it, remove the tree."""
    with tempfile.TemporaryDirectory(prefix="bench-policy-") as root:
        generate(root, sockets=sockets, cores_per_die=cores_per_die, threads_per_core=threads_per_core,
                 numa_per_socket=numa_per_socket, numbering="interleaved", isolated=isolated)
        return discover(root)


def _container(rng: random.Random) -> Container:
    roll = rng.random()
    if roll < 0.40:
        return Container("c")
    if roll < 0.75:
        return Container("c", {"cpu": rng.choice([100, 250, 500])})
    if roll < 0.875:
        cpu = rng.choice([200, 500, 750])
        return Container("c", {"cpu": cpu, "memory": 64 * MIB}, {"cpu": cpu, "memory": 64 * MIB})
    if roll < 0.95:
        cpu = 1000 * rng.choice([1, 1, 2, 4])  # exclusive in both
        return Container("c", {"cpu": cpu, "memory": 64 * MIB}, {"cpu": cpu, "memory": 64 * MIB})
    return Container("c", {"cpu": rng.choice([1500, 2500])})  # static-plus: exclusive + shared


def _workload(rng: random.Random, containers: int, churn: int) -> tuple[list[Call], dict[str, range]]:
    """The calls of the three phases, and which call indexes (from 1) belong to each."""
    ids = Ids()
    calls: list[Call] = []
    started: list[Started] = []
    for i in range(containers):
        ns = "kube-system" if rng.random() < 0.02 else "bench"
        new, st = start_calls(Pod(f"pod-c{i:05d}", (_container(rng),), ns, f"c{i:05d}"), ids, "create")
        calls += new
        started.append(st)
    phases = {"create": range(1, len(calls) + 1)}
    first = len(calls) + 1
    no_isolated = {"cri-resource-manager.intel.com/prefer-isolated-cpus": "false"}
    for i in range(churn):
        cpu = 1000 * rng.choice([1, 2])
        pod = Pod(f"px{i}", (Container("x", {"cpu": cpu, "memory": 64 * MIB}, {"cpu": cpu, "memory": 64 * MIB}),),
                  "bench", f"x{i:05d}", annotations=no_isolated)
        new, st = start_calls(pod, ids, "churn")
        calls += new
        calls += delete_calls(st, "churn")
    phases["churn"] = range(first, len(calls) + 1)
    first = len(calls) + 1
    for st in rng.sample(started, len(started)):
        calls += delete_calls(st, "remove")
    phases["remove"] = range(first, len(calls) + 1)
    return calls, phases


def _stats(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    n = len(ordered)

    def pct(p: float) -> float:
        return ordered[min(n - 1, int(p * n))] / 1e6

    return {"n": n, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": ordered[-1] / 1e6,
            "mean_ms": sum(ordered) / n / 1e6}


def _bench_one(name: str, topology: Topology, containers: int, churn: int, seed: int,
               reserved: int | str) -> dict:
    calls, phases = _workload(random.Random(seed), containers, churn)
    gc.disable()  # measure the policy, not the collector's timing luck
    try:
        o = simulate(calls, topology, Config(PolicyConfig(reserved_cpu=reserved)), name, default_registry())
    finally:
        gc.enable()
    return _result(name, o, phases)


def _result(name: str, o: Outcome, phases: dict[str, range]) -> dict:
    wall: dict[str, list[int]] = {p: [] for p in PHASES}
    cpu: dict[str, list[int]] = {p: [] for p in PHASES}
    others_sizes = [0]
    exclusive_now = warnings = 0
    for step in o.steps:
        phase = next(p for p in PHASES if step.index in phases[p])
        for e in step.events:
            wall[phase].append(e.ns)
            cpu[phase].append(e.cpu_ns)
            others_sizes.append(len(e.decision.others))
            if phase == "create":
                exclusive_now += bool(e.assignment is not None and e.assignment.exclusive)
                warnings += e.decision.warning is not None
    if o.policy.assignments():
        raise AssertionError(f"{name}: containers left after releasing all")
    if o.checker.count or o.policy_errors:
        raise AssertionError(f"{name}: {o.checker.count} invariant violations, {o.policy_errors} policy errors: "
                             f"{o.checker.violations[:3]}")
    return {
        **{phase: _stats(wall[phase]) for phase in PHASES},
        # CPU time of the deciding thread: wall-clock tails on a busy machine
        # are mostly preemption, this shows the policy's own cost.
        "cpu": {phase: _stats(cpu[phase]) for phase in PHASES},
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
        for phase in PHASES:
            s = r[phase]
            c = r["cpu"][phase]
            print(f"  {phase:<7} n={s['n']:<5} wall p50 {s['p50_ms']:.3f} ms  p99 {s['p99_ms']:.3f} ms  "
                  f"max {s['max_ms']:.3f} ms | cpu p50 {c['p50_ms']:.3f} ms  p99 {c['p99_ms']:.3f} ms")


if __name__ == "__main__":
    main()
