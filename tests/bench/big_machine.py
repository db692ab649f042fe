"""Decisions on a big sparse machine (issue 25): 4096 CPUs (8 packages, 16 NUMA nodes,
sparse CPU ids), 10,000 containers created and deleted through the engine's interceptors,
every registered policy.

The workload is `cri-resmgr simulate`'s churn (cri_resmgr/simulate/churn.py; some 2,048
containers alive at a time), run through `simulate()`: the relay's own ResourceManager,
cache and policy, with recorded replies instead of a runtime. Figures per policy:

* decision: the policy's `allocate`/`release`, wall clock and the thread's CPU time;
* engine call: the whole intercepted call (classification, cache, the decision and the
  updates to other containers worked out and described), which holds the allocation
  lock: this is what kubelet's call waits for beyond the runtime.

The invariant checker runs after every call (as tests/simulate/test_big_machine.py does
with 1,000 containers); a violation, an engine error or a policy error fails the section.
No targets: the figures are compared before/after a change (docs/benchmarks.md).

    python -m tests.bench.big_machine [--containers N] [--policy NAME ...]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.shape import topology_of
from tests.bench.relay import format_table

__all__ = ["SHAPE", "CONTAINERS", "POLICIES", "run", "format_result"]

SHAPE = "8s/16n/256c/2t/sparse"
CONTAINERS = 10_000
LIVE = 2048
RESERVED = 8
POLICIES = [p.name for p in default_registry() if p.factory is not None]


def _pct(ordered: list[int], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1e6 if ordered else 0.0


def _stats(wall: list[int], cpu: list[int]) -> dict[str, Any]:
    wall, cpu = sorted(wall), sorted(cpu)
    return {"n": len(wall), "wall_p50_ms": _pct(wall, 0.5), "wall_p99_ms": _pct(wall, 0.99),
            "wall_max_ms": wall[-1] / 1e6 if wall else 0.0,
            "cpu_p50_ms": _pct(cpu, 0.5), "cpu_p99_ms": _pct(cpu, 0.99)}


def run(containers: int = CONTAINERS, policies: Sequence[str] = (), log: Callable[[str], None] = print
        ) -> dict[str, Any]:
    t0 = time.monotonic()
    machine = topology_of(SHAPE)
    workload = churn_calls(containers, seed=1, target=LIVE)
    log(f"{len(machine.online)} CPUs and {len(workload)} calls made in {time.monotonic() - t0:.1f}s")
    result: dict[str, Any] = {"shape": SHAPE, "cpus": len(machine.online), "containers": containers,
                              "calls": len(workload), "policies": {}, "errors": []}
    for name in policies or POLICIES:
        gc.collect()
        c0, w0 = time.process_time(), time.monotonic()
        o = simulate(workload, machine, Config(PolicyConfig(reserved_cpu=RESERVED)), name, default_registry(),
                     keep_steps=False)
        cpu_s, wall_s = time.process_time() - c0, time.monotonic() - w0
        problems = ([f"{name}: {v}" for v in o.checker.violations[:3]] * bool(o.checker.count)
                    + [f"{name}: {m}" for m in o.messages[:3]]
                    + ([f"{name}: {o.policy_errors} policy errors"] if o.policy_errors else []))
        result["errors"] += problems
        result["policies"][name] = {
            "decision": _stats(o.decision_ns, o.decision_cpu_ns),
            "call": _stats(o.call_ns, o.call_cpu_ns),
            "cpu_s": round(cpu_s, 1), "wall_s": round(wall_s, 1), "checker_violations": o.checker.count,
            "alive": sum(1 for c in o.cache if not c.released)}
        log(f"{name}: {cpu_s:.1f}s CPU, {wall_s:.1f}s wall{'; ' + problems[0] if problems else ''}")
    if result["errors"]:
        result["first_error"] = result["errors"][0]
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for name, r in result["policies"].items():
        for what in ("decision", "call"):
            s = r[what]
            rows.append([name, what, s["n"], s["wall_p50_ms"] * 1e3, s["wall_p99_ms"] * 1e3, s["cpu_p50_ms"] * 1e3,
                         s["cpu_p99_ms"] * 1e3, s["wall_max_ms"] * 1e3])
    head = (f"decisions on {result['cpus']} sparse CPUs ({result['shape']}), {result['containers']} containers "
            f"created (at most {LIVE} alive at a time), checker after every call (times in us)")
    lines = [head, format_table(["policy", "what", "n", "wall p50", "wall p99", "cpu p50", "cpu p99", "wall max"],
                                rows)]
    lines += [f"{name}: {r['cpu_s']}s CPU for the run, {r['alive']} alive at the end, "
              f"{r['checker_violations']} checker violations" for name, r in result["policies"].items()]
    lines += [f"ERROR {e}" for e in result["errors"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.big_machine", description=__doc__.split("\n")[0])
    parser.add_argument("--containers", type=int, default=CONTAINERS)
    parser.add_argument("--policy", action="append", choices=POLICIES)
    args = parser.parse_args(argv)
    result = run(args.containers, args.policy or ())
    print(format_result(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
