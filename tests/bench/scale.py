"""Cost that grows with the node (issue 37): the same churn on a 64-CPU and a 4096-CPU shape,
back to back in one run, for every registered policy; the figure is the ratio big/small.

The workload is `cri-resmgr simulate -shape S -churn N -seed 1`'s (cri_resmgr/simulate/churn.py,
about half the CPUs' worth of containers alive at a time), run in process through `simulate()`
with the default configuration, as the command does. Per policy and shape:

* decision: the policy's `allocate`/`release`;
* engine call: the whole intercepted call (classification, cache, the decision, the updates
  to other containers worked out and described), which holds the allocation lock.

p99 of the wall clock (what `simulate -o json` reports in "timing") and of the thread's CPU
time. Target per policy: both CPU p99s grow at most x5 from small to big (CPU time, since on
a shared machine the wall-clock tails are other processes; the wall ratios are printed
beside). The invariant checker runs after every call; a violation, an engine error or a
policy error fails the section.

    python -m tests.bench.scale [--containers N] [--policy NAME ...]
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.shape import topology_of
from tests.bench.relay import format_table

__all__ = ["SMALL", "BIG", "CONTAINERS", "TARGET_RATIO", "POLICIES", "run", "format_result"]

SMALL = "1s/1n/32c/2t"
BIG = "8s/16n/256c/2t/sparse"
CONTAINERS = 2000
SEED = 1
TARGET_RATIO = 5.0
POLICIES = [p.name for p in default_registry() if p.factory is not None]
WHAT = ("decision", "call")


def _p99_us(ns: list[int]) -> float:
    s = sorted(ns)
    return s[min(len(s) - 1, int(0.99 * len(s)))] / 1e3 if s else 0.0


def _ratio(big: float, small: float) -> float:
    return round(big / small, 1) if small else float("inf")


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run(containers: int = CONTAINERS, policies: Sequence[str] = (), log: Callable[[str], None] = print,
        small: str = SMALL, big: str = BIG) -> dict[str, Any]:
    machines = {"small": topology_of(small), "big": topology_of(big)}
    workloads = {k: list(churn_calls(containers, seed=SEED, target=len(m.online) // 2)) for k, m in machines.items()}
    result: dict[str, Any] = {"shapes": {"small": small, "big": big},
                              "cpus": {k: len(m.online) for k, m in machines.items()},
                              "calls": {k: len(w) for k, w in workloads.items()},
                              "containers": containers, "loadavg_start": _loadavg(), "policies": {},
                              "errors": [], "targets": []}
    for name in policies or POLICIES:
        r: dict[str, Any] = {}
        for size, machine in machines.items():
            gc.collect()
            c0 = time.process_time()
            o = simulate(workloads[size], machine, Config(PolicyConfig()), name, default_registry(), keep_steps=False)
            problems = ([f"{name} {size}: {v}" for v in o.checker.violations[:3]] * bool(o.checker.count)
                        + [f"{name} {size}: {m}" for m in o.messages[:3]]
                        + ([f"{name} {size}: {o.policy_errors} policy errors"] if o.policy_errors else []))
            result["errors"] += problems
            r[size] = {"decision": {"n": len(o.decision_ns), "wall_p99_us": _p99_us(o.decision_ns),
                                    "cpu_p99_us": _p99_us(o.decision_cpu_ns)},
                       "call": {"n": len(o.call_ns), "wall_p99_us": _p99_us(o.call_ns),
                                "cpu_p99_us": _p99_us(o.call_cpu_ns)},
                       "checker_violations": o.checker.count, "cpu_s": round(time.process_time() - c0, 1)}
            log(f"{name} on {size} ({len(machine.online)} CPUs): {r[size]['cpu_s']}s CPU"
                f"{'; ' + problems[0] if problems else ''}")
        r["ratio"] = {w: {clock: _ratio(r["big"][w][f"{clock}_p99_us"], r["small"][w][f"{clock}_p99_us"])
                          for clock in ("wall", "cpu")} for w in WHAT}
        met = all(r["ratio"][w]["cpu"] <= TARGET_RATIO for w in WHAT)
        result["targets"].append({"target": f"{name}: decision and call CPU p99 grow <= x{TARGET_RATIO:g} "
                                            f"from {result['cpus']['small']} to {result['cpus']['big']} CPUs",
                                  "verdict": "PASS" if met else "MISS"})
        result["policies"][name] = r
    result["loadavg_end"] = _loadavg()
    if result["errors"]:
        result["first_error"] = result["errors"][0]
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for (name, r), target in zip(result["policies"].items(), result["targets"], strict=True):
        for w in WHAT:
            s, b, q = r["small"][w], r["big"][w], r["ratio"][w]
            rows.append([name, w, s["wall_p99_us"], b["wall_p99_us"], f"x{q['wall']:g}",
                         s["cpu_p99_us"], b["cpu_p99_us"], f"x{q['cpu']:g}", target["verdict"]])
    cpus, shapes = result["cpus"], result["shapes"]
    lines = [f"the same churn ({result['containers']} containers, seed {SEED}, half the CPUs' worth alive) on "
             f"{cpus['small']} CPUs ({shapes['small']}) and {cpus['big']} CPUs ({shapes['big']}); p99 in us; "
             f"target: CPU p99 big/small <= x{TARGET_RATIO:g} for decision and call",
             f"load average (1, 5, 15 min): {result['loadavg_start']} at the start, {result['loadavg_end']} at the end",
             format_table(["policy", "what", "wall small", "wall big", "wall x", "cpu small", "cpu big", "cpu x",
                           "target"], rows)]
    lines += [f"{name}: {r['small']['cpu_s']}s + {r['big']['cpu_s']}s CPU, "
              f"{r['small']['checker_violations'] + r['big']['checker_violations']} checker violations"
              for name, r in result["policies"].items()]
    lines += [f"ERROR {e}" for e in result["errors"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--containers", type=int, default=CONTAINERS)
    parser.add_argument("--policy", action="append", choices=POLICIES)
    args = parser.parse_args(argv)
    result = run(args.containers, args.policy or ())
    print(format_result(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
