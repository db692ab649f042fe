"""Decision latency of the balloons policy: 100 balloons, 1000 containers, 512 CPUs
(issue 12: p99 within 2 ms, including the knock-on updates).

The machine is tests/bench/policy.py's (2 sockets x 128 cores x 2 threads, 8 NUMA
nodes), built in memory. Ten balloon types (namespaces ns0..ns9) of at most ten
balloons each (PreferNewBalloons: all 100 exist after the first hundred containers), MaxCPUs 8;
half of them lend idle CPUs within their NUMA node, so a
resize also changes the cpusets of other balloons' containers. 1000 containers of
0 to 900 milli-CPU are created (each placement inflates a balloon, creates one or
packs into one), then churned (one released, one created, 1000 times), then all
released. Each `allocate`/`release` is timed, wall clock and the thread's CPU
time; its `others` (the members of every balloon whose cpuset changed) are computed
inside the call, so the figure includes the knock-on updates.

    python -m tests.bench.balloons
"""

from __future__ import annotations

import gc
import random
import time
from typing import Any

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.balloons import BalloonsPolicy
from cri_resmgr.policy.context import build_context
from cri_resmgr.topology import Topology
from tests.bench.relay import format_table
from tests.topology.shapes import machine

__all__ = ["run", "format_result", "TARGET_P99_MS"]

TARGET_P99_MS = 2.0
TYPES = [{"Name": f"t{i}", "Namespaces": [f"ns{i}"], "MaxBalloons": 10, "MaxCPUs": 8, "PreferNewBalloons": True,
          **({"ShareIdleCPUsInSame": "numa"} if i % 2 else {})} for i in range(10)]
REQUESTS = (0, 100, 200, 250, 300, 500, 500, 750, 900)


def build_topology() -> Topology:
    return machine(packages=2, cores=128, nodes_per_package=4, interleaved=True)


def _pct(ordered: list[int], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1e6


def _stats(wall: list[int], cpu: list[int]) -> dict[str, Any]:
    wall, cpu = sorted(wall), sorted(cpu)
    return {"n": len(wall), "wall_p50_ms": _pct(wall, 0.5), "wall_p99_ms": _pct(wall, 0.99),
            "wall_max_ms": wall[-1] / 1e6, "cpu_p50_ms": _pct(cpu, 0.5), "cpu_p99_ms": _pct(cpu, 0.99)}


def measure(topology: Topology, containers: int = 1000, churn: int = 1000, seed: int = 1) -> dict[str, Any]:
    ctx = build_context(topology, reserved=4, options={"BalloonTypes": TYPES})
    policy = BalloonsPolicy(ctx)
    rng = random.Random(seed)
    counter = 0
    live: list[str] = []
    phases: dict[str, tuple[list[int], list[int]]] = {p: ([], []) for p in ("create", "churn", "remove")}
    max_others = 0
    warnings = 0

    def create(phase: str) -> None:
        nonlocal counter, max_others, warnings
        counter += 1
        ns = f"ns{rng.randrange(10)}"
        w = Workload(key=f"c{counter}", namespace=ns, pod=f"p{counter // 3}", name=f"c{counter}",
                     qos=QoS.BURSTABLE, cpu_request=rng.choice(REQUESTS))
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        d = policy.allocate(w)
        phases[phase][0].append(time.perf_counter_ns() - t0)
        phases[phase][1].append(time.thread_time_ns() - c0)
        max_others = max(max_others, len(d.others))
        warnings += d.warning is not None
        live.append(w.key)

    def release(phase: str) -> None:
        nonlocal max_others
        key = live.pop(rng.randrange(len(live)))
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        d = policy.release(key)
        phases[phase][0].append(time.perf_counter_ns() - t0)
        phases[phase][1].append(time.thread_time_ns() - c0)
        max_others = max(max_others, len(d.others))

    gc.disable()  # time the policy, not the collector
    try:
        for _ in range(containers):
            create("create")
        balloons = sum(1 for b in policy.balloons() if b.members)
        for _ in range(churn):
            release("churn")
            create("churn")
        while live:
            release("remove")
    finally:
        gc.enable()
    out: dict[str, Any] = {p: _stats(*times) for p, times in phases.items()}
    all_wall = [t for w, _ in phases.values() for t in w]
    all_cpu = [t for _, c in phases.values() for t in c]
    out["all"] = _stats(all_wall, all_cpu)
    out.update(cpus=len(topology.online), balloons=balloons, containers=containers, max_others=max_others,
               warnings=warnings)
    return out


def run(containers: int = 1000, churn: int = 1000, seed: int = 1) -> dict[str, Any]:
    result = measure(build_topology(), containers, churn, seed)
    # On the thread's CPU time: wall-clock tails on a shared machine are other processes.
    result["targets"] = [{"target": f"balloons decision p99 <= {TARGET_P99_MS} ms "
                                    f"({result['balloons']} balloons, {containers} containers, {result['cpus']} CPUs)",
                          "verdict": "PASS" if result["all"]["cpu_p99_ms"] <= TARGET_P99_MS else "MISS"}]
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for phase in ("create", "churn", "remove", "all"):
        s = result[phase]
        rows.append([phase, s["n"], s["wall_p50_ms"] * 1e3, s["wall_p99_ms"] * 1e3, s["wall_max_ms"] * 1e3,
                     s["cpu_p50_ms"] * 1e3, s["cpu_p99_ms"] * 1e3])
    return (f"balloons decisions: {result['cpus']} CPUs, {result['balloons']} balloons holding "
            f"{result['containers']} containers (times in us; target: cpu p99 <= {TARGET_P99_MS * 1e3:.0f} us, "
            f"{result['targets'][0]['verdict']})\n"
            + format_table(["phase", "n", "wall p50", "wall p99", "wall max", "cpu p50", "cpu p99"], rows)
            + f"\nat most {result['max_others']} other containers updated by one decision; "
              f"{result['warnings']} best-effort placements")


if __name__ == "__main__":
    print(format_result(run()))
