"""In-place resize decisions of every policy on a big machine (issue 26's figure).

On the policy bench's generated machine (512 CPUs, 8 NUMA nodes), 1000 pods with one
container each are started (the policy bench's mix), then live Guaranteed and Burstable
containers are resized in place as kubelet forwards it (UpdateContainerResources with
the new shares and quota), through `cri-resmgr simulate`'s engine path with the
invariant checker after each call. What is timed is the policy's resize decision
(knock-on updates included); the target is a create's: p99 <= 2 ms (CPU time of the
deciding thread, which preemption on a busy machine does not inflate; wall time shown).

    python -m tests.bench.resize [--containers N] [--resizes N]
"""

from __future__ import annotations

import argparse
import gc
import random
from typing import Any

from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.calls import Call
from cri_resmgr.simulate.churn import resize_step
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.podcalls import Ids, Pod, Started, resize_call, start_calls
from cri_resmgr.topology import Topology
from tests.bench import policy as bench_policy
from tests.bench.relay import format_table

__all__ = ["run", "format_result", "main"]

POLICIES = ("static", "static-plus", "topology-aware", "balloons")
TARGET_P99_MS = 2.0


def _calls(rng: random.Random, containers: int, resizes: int) -> list[Call]:
    ids = Ids()
    calls: list[Call] = []
    live: list[Started] = []
    for i in range(containers):
        new, st = start_calls(Pod(f"pod-c{i:05d}", (bench_policy._container(rng),), "bench", f"c{i:05d}"), ids,
                              "create")
        calls += new
        live.append(st)
    done = 0
    while done < resizes:
        i = rng.randrange(len(live))
        step = resize_step(rng, live[i].pod)
        if step is None:
            continue
        call, live[i] = resize_call(live[i], step, f"resize {step}")
        calls.append(call)
        done += 1
    return calls


def _stats(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples) or [0]
    n = len(ordered)
    return {"n": len(samples), "p50_ms": ordered[n // 2] / 1e6, "p99_ms": ordered[min(n - 1, int(0.99 * n))] / 1e6,
            "max_ms": ordered[-1] / 1e6}


def run(containers: int = 1000, resizes: int = 300, seed: int = 26, topology: Topology | None = None) -> dict[str, Any]:
    topology = topology or bench_policy.build_topology()
    calls = _calls(random.Random(seed), containers, resizes)
    result: dict[str, Any] = {"cpus": len(topology.online), "containers": containers, "policies": {}, "targets": []}
    for name in POLICIES:
        gc.disable()  # the policy, not the collector's timing luck
        try:
            o = simulate(calls, topology, Config(PolicyConfig(reserved_cpu=2)), name, default_registry(),
                         keep_steps=True)
        finally:
            gc.enable()
        events = [e for s in o.steps for e in s.events if e.action == "resize"]
        refused = sum(1 for s in o.steps if s.method == "UpdateContainerResources" and s.failed)
        if o.checker.count or o.policy_errors:
            raise AssertionError(f"{name}: {o.checker.count} invariant violations, {o.policy_errors} policy errors: "
                                 f"{o.checker.violations[:3]}")
        r = {"wall": _stats([e.ns for e in events]), "cpu": _stats([e.cpu_ns for e in events]), "refused": refused,
             "max_others": max((len(e.decision.others) for e in events), default=0)}
        result["policies"][name] = r
        result["targets"].append({"target": f"{name}: resize decision cpu p99 <= {TARGET_P99_MS} ms",
                                  "verdict": "PASS" if r["cpu"]["p99_ms"] <= TARGET_P99_MS else "MISS"})
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for (name, r), target in zip(result["policies"].items(), result["targets"], strict=True):
        rows.append([name, r["cpu"]["n"], r["refused"], r["wall"]["p50_ms"] * 1e3, r["wall"]["p99_ms"] * 1e3,
                     r["cpu"]["p50_ms"] * 1e3, r["cpu"]["p99_ms"] * 1e3, r["max_others"], target["verdict"]])
    return "\n".join([
        f"in-place resize decisions: {result['cpus']} CPUs, {result['containers']} containers (times in us; "
        f"target cpu p99 <= {TARGET_P99_MS} ms)",
        format_table(["policy", "resizes", "refused", "wall p50", "wall p99", "cpu p50", "cpu p99", "max others",
                      "target"], rows)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--resizes", type=int, default=300)
    args = parser.parse_args(argv)
    print(format_result(run(args.containers, args.resizes)))


if __name__ == "__main__":
    main()
