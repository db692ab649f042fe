"""`make bench` section nri-sync: the NRI plugin's start against a runtime that already
runs 1000 containers, end to end through the real `cri-resmgr-nri` process and the
in-process runtime double (tests/nri/runtime_double.py) on a generated 64-CPU machine
(2 sockets, 16 cores each, 2 threads); 1 in 100 containers Guaranteed (1 CPU).

Per policy (static, topology-aware, balloons), twice: a first start (an empty state
directory: every container adopted at Synchronize) and a restart on the state that
start saved (the saved allocations restored at Configure, then confirmed by the
Synchronize). Figures, wall times at the double:
  - registration to active: from the double receiving RegisterPlugin to its having
    the reply of Configure, at which the plugin's configuration and policy are in
    force (issue 23: the plugin must not wait for a Synchronize that may never come);
  - Synchronize: from the first part's request to the last reply decoded, the reply
    holding every container's cpuset. Target: <= 200 ms with 1000 containers (NRI's
    default request timeout is 2 s for all parts together; the references' balloons
    exceeds it at 100 containers on big nodes, nri-plugins #746).
The double configures a 10 s request timeout so that the whole reply is waited for
(the plugin answers with what is ready at 75 % of the timeout); a reply that does not
place every container is reported. Beside each wall time, the plugin process's CPU time
over the same span (the scheduler's ns count of its threads): on a loaded 2-CPU machine
the wall time is mostly waiting for a CPU.

`make bench` runs 1000 containers (the target) and 5000 (issue 37: reported, with the
plugin's own deadline at NRI's default request timeout, 1.5 s, as its target). Alone:

    python -m tests.bench.nri_sync [--containers 1000 5000] [--policy static ...] [--load N]

`--load N` starts N busy-loop processes for the run (a loaded node: issue 37's figures
were taken at load averages of 8-10 on 2 CPUs) and ends them, by their PIDs, after it;
the load averages at the start and the end of each policy's run are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.bench.relay import cpu_seconds, format_table
from tests.harness import sysfs
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod

TARGET_SYNC_MS = 200.0
TARGET_CONTAINERS = 1000
# 5000 containers: within the plugin's own deadline at NRI's default 2 s request timeout
# (it answers with what is ready at 75 % of it: hooks.HOOK_SHARE).
BIG_CONTAINERS = 5000
BIG_SYNC_MS = 1500.0
CONFIGS = {
    "static": "policy:\n  Active: static\n  ReservedResources:\n    CPU: 2\n",
    "topology-aware": "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 2\n",
    "balloons": ("policy:\n  Active: balloons\n  ReservedResources:\n    CPU: 2\n  balloons:\n"
                 "    BalloonTypes:\n      - Name: work\n        MinCPUs: 2\n        MaxCPUs: 16\n"
                 "        MinBalloons: 1\n"),
}


def _populate(double: RuntimeDouble, containers: int) -> None:
    for i in range(containers):
        qos = "guaranteed" if i % 100 == 50 else ("burstable" if i % 2 else "besteffort")
        pid = f"p{i}"
        double.pods[pid] = pod(pid, qos)
        double.containers[f"c{i}"] = (guaranteed(f"c{i}", pid, 1) if qos == "guaranteed"
                                      else container(f"c{i}", pid, milli_cpu=100 if i % 2 else 0))


async def _one_start(double: RuntimeDouble, plugin: PluginProcess, count: int) -> dict[str, Any]:
    plugin.start()
    assert plugin.proc is not None
    pid = plugin.proc.pid
    double.clock = lambda: cpu_seconds(pid)
    try:
        s = await double.wait_ready(count=count, timeout=120)
    finally:
        await asyncio.to_thread(plugin.stop)
    t, cpu = s.times, s.cpu
    placed = sum(1 for c in double.containers.values() if c.linux.resources.cpu.cpus)
    updates = len(s.synchronized.update) if s.synchronized is not None else 0
    return {"active_ms": (t["configured"] - t["registered"]) * 1e3,
            "sync_ms": (t["synchronized"] - t["sync_start"]) * 1e3,
            "active_cpu_ms": (cpu["configured"] - cpu["registered"]) * 1e3,
            "sync_cpu_ms": (cpu["synchronized"] - cpu["sync_start"]) * 1e3,
            "updates": updates, "placed": placed}


def run_policy(policy: str, containers: int = 1000) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="crirm-bench-nsy-", dir="/tmp"))
    try:
        sysfs.generate(work / "host", sockets=2, cores_per_die=16, threads_per_core=2)
        plugin = PluginProcess(work, str(work / "nri.sock"), str(work / "host"), config=CONFIGS[policy])

        async def main() -> dict[str, Any]:
            double = RuntimeDouble(plugin.nri_socket)
            _populate(double, containers)
            await double.start()
            gc.collect()
            gc.freeze()  # the double's start-up objects: its collector is not the plugin's latency
            try:
                first = await _one_start(double, plugin, 1)
                for c in double.containers.values():  # the restart must confirm, not just keep, cpusets
                    c.linux.resources.cpu.cpus = ""
                restart = await _one_start(double, plugin, 2)
                return {"first": first, "restart": restart}
            finally:
                await double.close()

        result = asyncio.run(main())
        result["log_tail"] = plugin.log().splitlines()[-3:]
    finally:
        gc.unfreeze()
        shutil.rmtree(work, ignore_errors=True)
    return result


@contextlib.contextmanager
def busy_load(n: int) -> Iterator[list[int]]:
    """`n` busy-loop processes for the duration (an artificial load), ended by their PIDs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
             for _ in range(n)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _target_ms(containers: int) -> float:
    return TARGET_SYNC_MS if containers <= TARGET_CONTAINERS else BIG_SYNC_MS


def run(containers: Sequence[int] = (TARGET_CONTAINERS, BIG_CONTAINERS), policies: Sequence[str] = tuple(CONFIGS),
        load: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = {"load": load, "sizes": [], "targets": []}
    with busy_load(load):
        for n in containers:
            size: dict[str, Any] = {"containers": n, "policies": {}}
            for policy in policies:
                before = os.getloadavg()[0]
                r = run_policy(policy, n)
                r["loadavg"] = (before, os.getloadavg()[0])
                size["policies"][policy] = r
            result["sizes"].append(size)
    for size in result["sizes"]:
        n, runs = size["containers"], size["policies"].values()
        worst = max(r[phase]["sync_ms"] for r in runs for phase in ("first", "restart"))
        complete = all(r[phase]["placed"] == n for r in runs for phase in ("first", "restart"))
        limit = _target_ms(n)
        result["targets"].append({
            "target": f"Synchronize with {n} running containers <= {limit:g} ms (every container placed in the reply)",
            "verdict": "PASS" if worst <= limit and complete else "MISS"})
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for size in result["sizes"]:
        for policy, r in size["policies"].items():
            for phase in ("first", "restart"):
                f = r[phase]
                rows.append([size["containers"], policy, phase, f["active_ms"], f["active_cpu_ms"], f["sync_ms"],
                             f["sync_cpu_ms"], f["updates"], f["placed"],
                             "{:.1f}-{:.1f}".format(*r.get("loadavg", (0.0, 0.0)))])
    load = result.get("load", 0)
    return "\n".join([
        "NRI plugin start with N running containers (wall ms at the runtime double; first: empty state, restart: "
        "on the saved state)" + (f"; {load} busy-loop processes running (--load)" if load else ""),
        format_table(["containers", "policy", "start", "reg->active ms", "(plugin CPU ms)", "Synchronize ms",
                      "(plugin CPU ms)", "updates in reply", "placed", "load avg"], rows, left=3),
        "wall: at the double; plugin CPU: the plugin process's CPU time over the same span "
        "(/proc/PID/task/*/schedstat), which the load of a shared machine does not blur",
        *(f"{t['target']}: {t['verdict']}" for t in result["targets"])])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.nri_sync", description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, nargs="+", default=[TARGET_CONTAINERS, BIG_CONTAINERS])
    ap.add_argument("--policy", nargs="+", choices=tuple(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--load", type=int, default=0, help="busy-loop processes to run meanwhile (default 0)")
    args = ap.parse_args(argv)
    result = run(args.containers, args.policy, args.load)
    print(format_result(result))
    return 0 if all(t["verdict"] == "PASS" for t in result["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main())
