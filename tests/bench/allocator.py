"""Latency of one CPU allocation on a 512-CPU machine (issue 10: p99 within 2 ms),
and the time to discover a 4096-CPU machine from its sysfs tree.

The benchmark machine of tests/bench/policy.py (2 sockets x 128 cores x 2
threads, 8 NUMA nodes, discovered from a generated sysfs tree) and an AMD-like
one built in memory (8 dies, an L3 per 8 cores: 32 L3 groups). 1000
containers come and go (a seeded mix of 1 to 64 CPUs, about 40% released at
each step); every `CPUAllocator.allocate` is timed, wall clock and the
thread's CPU time (which preemption on a busy machine does not inflate).

    python -m tests.bench.allocator
"""

from __future__ import annotations

import gc
import random
import shutil
import statistics
import tempfile
import time
from typing import Any

from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet
from tests.bench.policy import build_topology
from tests.bench.relay import format_table
from tests.topology.shapes import machine

__all__ = ["run", "format_result", "TARGET_P99_MS"]

TARGET_P99_MS = 2.0
TARGET_DISCOVERY_S = 1.0  # start-up on the largest machines must not be noticeable
SIZES = (1, 1, 1, 2, 2, 2, 3, 4, 4, 6, 8, 8, 16, 32, 64)


def _pct(ordered: list[int], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1e6


def measure(topology: Topology, containers: int = 1000, seed: int = 1) -> dict[str, Any]:
    alloc = CPUAllocator(topology)
    rng = random.Random(seed)
    free = topology.online
    held: list[CPUSet] = []
    wall: list[int] = []
    cpu: list[int] = []
    gc.disable()  # time the allocator, not the collector
    try:
        while len(wall) < containers:
            if held and (rng.random() < 0.4 or len(free) < 64):
                free = alloc.release(free, held.pop(rng.randrange(len(held))))
            n = rng.choice(SIZES)
            if n > len(free):
                continue
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            got = alloc.allocate(free, n)
            wall.append(time.perf_counter_ns() - t0)
            cpu.append(time.thread_time_ns() - c0)
            free = free - got
            held.append(got)
    finally:
        gc.enable()
    wall.sort()
    cpu.sort()
    return {"cpus": len(topology.online), "n": len(wall),
            "wall_p50_ms": _pct(wall, 0.5), "wall_p99_ms": _pct(wall, 0.99), "wall_max_ms": wall[-1] / 1e6,
            "cpu_p50_ms": _pct(cpu, 0.5), "cpu_p99_ms": _pct(cpu, 0.99)}


def measure_discovery(rounds: int = 5) -> dict[str, Any]:
    """discover() on a generated 4096-CPU tree (sparse ids, 8 NUMA nodes, L3 groups)."""
    from tests.harness.sysfs_classes import sparse_4096, write_machine
    root = tempfile.mkdtemp(prefix="crirm-bench-sysfs-")
    try:
        write_machine(root, sparse_4096())
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            topo = discover(root)
            times.append(time.perf_counter() - t0)
        return {"cpus": len(topo.online), "rounds": rounds, "min_s": min(times),
                "median_s": statistics.median(times)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(containers: int = 1000, seed: int = 1) -> dict[str, Any]:
    machines = {
        "xeon-like 2x128x2, 8 nodes": build_topology(isolated=()),
        "amd-like 2x4 dies, 32 L3": machine(packages=2, dies=4, cores=32, l3_cores=8, nodes_per_package=4),
    }
    result: dict[str, Any] = {"machines": {name: measure(t, containers, seed) for name, t in machines.items()}}
    # The target is on the thread's CPU time: wall-clock tails on a shared
    # machine are mostly other processes.
    result["targets"] = [
        {"target": f"{name}: allocation p99 <= {TARGET_P99_MS} ms",
         "verdict": "PASS" if m["cpu_p99_ms"] <= TARGET_P99_MS else "MISS"}
        for name, m in result["machines"].items()
    ]
    d = result["discovery"] = measure_discovery()
    result["targets"].append({"target": f"discovery of {d['cpus']} CPUs (median) <= {TARGET_DISCOVERY_S} s",
                              "verdict": "PASS" if d["median_s"] <= TARGET_DISCOVERY_S else "MISS"})
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for (name, m), target in zip(result["machines"].items(), result["targets"], strict=False):
        rows.append([name, m["cpus"], m["n"], m["wall_p50_ms"] * 1e3, m["wall_p99_ms"] * 1e3,
                     m["wall_max_ms"] * 1e3, m["cpu_p50_ms"] * 1e3, m["cpu_p99_ms"] * 1e3, target["verdict"]])
    return ("CPUAllocator.allocate, 1000 containers coming and going (times in us; target: cpu p99 "
            f"<= {TARGET_P99_MS * 1e3:.0f} us)\n"
            + format_table(["machine", "cpus", "n", "wall p50", "wall p99", "wall max", "cpu p50", "cpu p99",
                            "target"], rows)
            + _format_discovery(result))


def _format_discovery(result: dict[str, Any]) -> str:
    d = result.get("discovery")
    if d is None:
        return ""
    return (f"\ndiscovery of a {d['cpus']}-CPU sysfs tree: median {d['median_s'] * 1e3:.0f} ms, "
            f"min {d['min_s'] * 1e3:.0f} ms over {d['rounds']} rounds ({result['targets'][-1]['verdict']})")


if __name__ == "__main__":
    print(format_result(run()))
