"""`make bench`: every benchmark section in one run, one table each.

    python -m tests.bench [--only relay|policy|allocator|topology-aware|balloons|webhook|nri|nri-sync|nri-irq|resize|
                                  big-machine|scale ...] [--json FILE]

Sections:
  relay    the relay process vs direct containerd (tests.bench.relay)
  policy   static / static-plus decision latency on a generated 512-CPU machine
           (tests.bench.policy)
  allocator  one CPU allocation on 512 CPUs, 1000 containers; p99 target 2 ms
           (tests.bench.allocator)
  balloons  balloons decisions, 100 balloons / 1000 containers / 512 CPUs, knock-on
           updates included; p99 target 2 ms (tests.bench.balloons)
  webhook  admission reviews/s and latency over TLS (tests.bench.webhook)
  topology-aware  its decisions on 512 CPUs / 8 nodes / 1000 containers with the
           knock-on updates (p99 target 2 ms) and their restore (target 1 s)
           (tests.bench.topology_aware)
  nri      the NRI plugin process's CreateContainer hook latency with 1000
           containers; p99 target 5 ms (tests.bench.nri)
  nri-sync the NRI plugin's start against 1000 and 5000 running containers: registration
           to active, and Synchronize end to end; targets 200 ms (1000) and 1.5 s (5000)
           (tests.bench.nri_sync; alone with --containers, --policy, --load N busy loops)
  nri-irq  the NRI plugin's Synchronize under balloons with 100 containers and 600
           controllable IRQs on a kernel-like /proc; target 200 ms (tests.bench.nri_irq)
  resize   in-place resize decisions of every policy, 512 CPUs / 1000 containers;
           p99 target 2 ms (tests.bench.resize)
  big-machine  every policy's decisions and the engine's calls on 4096 sparse CPUs,
           10,000 containers churned, the invariant checker after every call (fails
           on a violation); no target, compared before/after (tests.bench.big_machine)
  scale    every policy, the same churn (2000 containers) on 64 and on 4096 CPUs back to
           back: decision and call p99 small, big and big/small; target x5 per policy,
           fails on an invariant violation (tests.bench.scale)

A section that fails is reported with its error and the others still run; the
exit status is 1 if any section failed or missed a target. Everything a
section starts (containerd, relay and webhook processes, directories,
cgroups) is stopped and removed again, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.bench import allocator as bench_allocator
from tests.bench import balloons as bench_balloons
from tests.bench import big_machine as bench_big_machine
from tests.bench import nri as bench_nri
from tests.bench import nri_irq as bench_nri_irq
from tests.bench import nri_sync as bench_nri_sync
from tests.bench import policy as bench_policy
from tests.bench import relay as bench_relay
from tests.bench import resize as bench_resize
from tests.bench import scale as bench_scale
from tests.bench import topology_aware as bench_topology_aware
from tests.bench.relay import format_table

__all__ = ["SECTIONS", "Section", "run_sections", "main"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class Section:
    name: str
    run: Callable[[Log], dict[str, Any]]
    format: Callable[[dict[str, Any]], str]


# --- relay ---------------------------------------------------------------------

def _run_relay(log: Log) -> dict[str, Any]:
    return bench_relay.run(seconds=2.0, containers=100, creates=50, log=log)


# --- policy --------------------------------------------------------------------

def _run_policy(log: Log) -> dict[str, Any]:
    t0 = time.monotonic()
    topology = bench_policy.build_topology()
    log(f"topology generated and discovered in {time.monotonic() - t0:.1f}s")
    return bench_policy.run(containers=1000, churn=200, topology=topology)


def _format_policy(result: dict[str, Any]) -> str:
    topo = result["topology"]
    rows = []
    for name in bench_policy.POLICIES:
        r = result[name]
        for phase in ("create", "churn", "remove"):
            s, c = r[phase], r["cpu"][phase]
            rows.append([name, phase, s["n"], s["p50_ms"] * 1e3, s["p99_ms"] * 1e3, s["max_ms"] * 1e3,
                         c["p50_ms"] * 1e3, c["p99_ms"] * 1e3])
    lines = [f"policy decisions: {topo['cpus']} CPUs, {topo['numa_nodes']} NUMA nodes, isolated "
             f"{topo['isolated']}; {result['containers']} containers (times in us)",
             format_table(["policy", "phase", "n", "wall p50", "wall p99", "wall max", "cpu p50", "cpu p99"], rows)]
    for name in bench_policy.POLICIES:
        r = result[name]
        lines.append(f"{name}: {r['exclusive_containers']} containers with exclusive CPUs, "
                     f"{r['warnings']} warnings, at most {r['max_others']} others updated by one decision")
    return "\n".join(lines)


# --- webhook -------------------------------------------------------------------

_WEBHOOK_ARGS = {"max_seconds": 60.0}  # its own defaults otherwise


def _run_webhook(log: Log) -> dict[str, Any]:
    # Being finished elsewhere: import late, and pass only the arguments its
    # run() accepts.
    module = importlib.import_module("tests.bench.webhook")
    accepted = inspect.signature(module.run).parameters
    return module.run(**{k: v for k, v in _WEBHOOK_ARGS.items() if k in accepted})


def _format_webhook(result: dict[str, Any]) -> str:
    try:
        module = importlib.import_module("tests.bench.webhook")
        return module.format_table(result)
    except (ImportError, AttributeError, KeyError):
        return format_table(["webhook", "value"], [[k, v] for k, v in result.items()])


SECTIONS: dict[str, Section] = {
    "relay": Section("relay", _run_relay, bench_relay.format_result),
    "policy": Section("policy", _run_policy, _format_policy),
    "allocator": Section("allocator", lambda log: bench_allocator.run(), bench_allocator.format_result),
    "balloons": Section("balloons", lambda log: bench_balloons.run(), bench_balloons.format_result),
    "webhook": Section("webhook", _run_webhook, _format_webhook),
    "topology-aware": Section("topology-aware", lambda log: bench_topology_aware.run(),
                              bench_topology_aware.format_result),
    "nri": Section("nri", lambda log: bench_nri.run(), bench_nri.format_result),
    "nri-sync": Section("nri-sync", lambda log: bench_nri_sync.run(), bench_nri_sync.format_result),
    "nri-irq": Section("nri-irq", lambda log: bench_nri_irq.run(), bench_nri_irq.format_result),
    "resize": Section("resize", lambda log: bench_resize.run(), bench_resize.format_result),
    "big-machine": Section("big-machine", lambda log: bench_big_machine.run(log=log), bench_big_machine.format_result),
    "scale": Section("scale", lambda log: bench_scale.run(log=log), bench_scale.format_result),
}


# --- the run -------------------------------------------------------------------

def _section_failed(result: dict[str, Any]) -> bool:
    """A section that crashed or had failed calls; a missed target is reported
    (MISS in the tables), not failed: figures on shared machines are noisy."""
    if "error" in result:
        return True
    return bool(result.get("errors"))  # the webhook's failed reviews


def run_sections(names: Sequence[str], out: Callable[[str], None] = print,
                 interrupted: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Runs the named sections in order and prints each one's table as it
    finishes; a section's exception becomes {"error": ...} in its result,
    unless `interrupted()` says it came from a Ctrl-C (which also reaches the
    child processes, so a section may fail on a dead relay first)."""
    results: dict[str, Any] = {}
    for name in names:
        section = SECTIONS[name]
        out(f"\n=== {name} ===")
        t0 = time.monotonic()
        try:
            result = section.run(lambda text: out(f"  .. {text}"))
        except KeyboardInterrupt:
            raise
        except Exception as e:  # one broken section must not hide the others' figures
            if interrupted():
                raise KeyboardInterrupt from e
            out(f"{name}: FAILED: {e!r}")
            out(traceback.format_exc().rstrip())
            results[name] = {"error": repr(e)}
            continue
        result["elapsed_s"] = round(time.monotonic() - t0, 1)
        results[name] = result
        out(section.format(result))
        out(f"({name}: {result['elapsed_s']}s)")
    return results


def _summary(results: dict[str, Any]) -> str:
    rows = []
    for name, result in results.items():
        if "error" in result:
            rows.append([name, "FAILED", result["error"][:80]])
            continue
        targets = result.get("targets", [])
        missed = [t["target"] for t in targets if t["verdict"] == "MISS"]
        if missed:
            rows.append([name, "MISS", f"{len(missed)} of {len(targets)} targets missed (see its table)"])
        elif result.get("errors"):
            rows.append([name, "ERRORS", str(result.get("first_error", ""))[:80]])
        else:
            rows.append([name, "PASS" if targets else "ok", f"{len(targets)} targets met" if targets else "no targets"])
    return format_table(["section", "result", "detail"], rows, left=3)


class _Signals:
    """SIGINT and SIGTERM both unwind as KeyboardInterrupt, so every cleanup
    runs; remembers that one came."""

    def __init__(self) -> None:
        self.received = False

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.received:
            self.received = True
            raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench",
                                     description="Run the cri-resmgr benchmarks and print one table per section.")
    parser.add_argument("--only", action="append", choices=list(SECTIONS), metavar="SECTION",
                        help=f"run only this section (repeatable; one of {', '.join(SECTIONS)})")
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    args = parser.parse_args(argv)
    names = args.only or list(SECTIONS)
    signals = _Signals()
    signals.install()
    started = time.monotonic()
    try:
        results = run_sections(names, out=lambda text: print(text, flush=True),
                               interrupted=lambda: signals.received)
    except KeyboardInterrupt:
        print("\ninterrupted; everything started was stopped", file=sys.stderr)
        return 130
    print("\n=== summary ===")
    print(_summary(results))
    print(f"(total {time.monotonic() - started:.0f}s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"figures written to {args.json}")
    return 1 if any(_section_failed(r) for r in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
