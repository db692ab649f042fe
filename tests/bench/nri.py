"""`make bench` section nri: the CreateContainer hook's latency through the real
`cri-resmgr-nri` process, as the runtime sees it (NRI's multiplexer and ttRPC
both ways, the static policy deciding), with up to 1000 containers.

The in-process runtime double (tests/nri/runtime_double.py) creates 1000
containers on a generated 64-CPU machine (2 sockets, 16 cores each, 2 threads),
1 in 100 Guaranteed with an exclusive CPU (each of those shrinks the shared pool,
so its reply carries an update for every shared container), then, with 1000
containers present, removes and creates 200 more one by one. Times are wall
times of the CreateContainer call at the double, from the request's write to the
reply's decode. Target: p99 under 5 ms with 1000 containers. Beside them, the
plugin's own time in the hook (its /metrics histogram, so a bucket bound) and its
CPU time per steady round (a stop, a remove and a create; /proc/PID/stat): on a
loaded 2-CPU machine the round trip's tail is mostly the two processes waiting
for a CPU, so judge changes by the CPU figure. The double's start-up objects are
frozen out of its collector (its full passes are not the plugin's latency). The
engine alone, in-process: tests/bench/nri_engine.py.
"""

from __future__ import annotations

import asyncio
import gc
import re
import shutil
import socket
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.bench.relay import format_table, proc_cpu_seconds
from tests.harness import sysfs
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod

TARGET_P99_MS = 5.0
CONFIG = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 2\n"


def _stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    if not s:
        return {"n": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {"n": len(s), "p50_ms": statistics.median(s) * 1e3,
            "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3, "max_ms": s[-1] * 1e3}


async def _scenario(double: RuntimeDouble, containers: int, churn: int,
                    cpu: Callable[[], float] = lambda: 0.0) -> dict[str, Any]:
    await double.wait_ready()
    fill: list[float] = []
    exclusive: list[float] = []
    updates = 0
    for i in range(containers):
        qos = "guaranteed" if i % 100 == 50 else ("burstable" if i % 2 else "besteffort")
        pid = f"p{i}"
        double.pods[pid] = pod(pid, qos)
        c = guaranteed(f"c{i}", pid, 1) if qos == "guaranteed" else container(f"c{i}", pid, milli_cpu=100 if i % 2 else 0)
        t0 = time.perf_counter()
        reply = await double.create(c)
        took = time.perf_counter() - t0
        (exclusive if qos == "guaranteed" else fill).append(took)
        updates += len(reply.update)
    steady: list[float] = []
    cpu_before = cpu()
    for j in range(churn):
        victim = f"c{1 + 2 * j}"  # burstable ones: the pool stays as it is
        await double.stop(victim)
        await double.remove(victim)
        pid = f"q{j}"
        double.pods[pid] = pod(pid, "burstable")
        t0 = time.perf_counter()
        await double.create(container(f"n{j}", pid, milli_cpu=100))
        steady.append(time.perf_counter() - t0)
    # The plugin's CPU time per steady round (a stop, a remove and a create): the
    # measure that machine load does not blur.
    steady_cpu_ms = (cpu() - cpu_before) / max(churn, 1) * 1e3
    return {"steady_cpu_ms_per_round": steady_cpu_ms, "fill": _stats(fill), "exclusive": _stats(exclusive), "steady": _stats(steady),
            "updates_in_replies": updates, "unsolicited": len(double.unsolicited)}


def _in_plugin_p99_ms(metrics: str) -> float:
    """The upper bound of the bucket holding the 99th percentile of the plugin's own
    CreateContainer hook times."""
    buckets = sorted((float(le), float(n)) for le, n in re.findall(
        r'cri_resmgr_relay_call_duration_seconds_bucket\{handling="intercepted",le="([^"+]+)",'
        r'method="CreateContainer"\} (\S+)', metrics))
    if not buckets:
        return float("nan")
    total = buckets[-1][1]
    return next(le for le, n in buckets if n >= 0.99 * total) * 1e3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(containers: int = 1000, churn: int = 200) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="crirm-bench-nri-", dir="/tmp"))
    try:
        sysfs.generate(work / "host", sockets=2, cores_per_die=16, threads_per_core=2)
        port = _free_port()
        plugin = PluginProcess(work, str(work / "nri.sock"), str(work / "host"), config=CONFIG,
                               args=("-metrics-address", f"127.0.0.1:{port}"))

        async def main() -> dict[str, Any]:
            double = RuntimeDouble(plugin.nri_socket)
            await double.start()
            # The double stands for containerd: its own collector's full passes (10-40 ms
            # here, with what the bench imported) are not the plugin's latency.
            gc.collect()
            gc.freeze()
            plugin.start()
            try:
                assert plugin.proc is not None
                pid = plugin.proc.pid
                result = await _scenario(double, containers, churn, lambda: proc_cpu_seconds(pid))
                url = f"http://127.0.0.1:{port}/metrics"
                metrics = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
                result["in_plugin_p99_ms"] = _in_plugin_p99_ms(metrics)
                return result
            finally:
                await asyncio.to_thread(plugin.stop)
                await double.close()

        result = asyncio.run(main())
    finally:
        gc.unfreeze()
        shutil.rmtree(work, ignore_errors=True)
    result["containers"] = containers
    p99 = result["steady"]["p99_ms"]
    result["targets"] = [{"target": f"CreateContainer hook p99 with {containers} containers <= {TARGET_P99_MS} ms",
                          "verdict": "PASS" if p99 <= TARGET_P99_MS else "MISS"}]
    return result


def format_result(result: dict[str, Any]) -> str:
    rows = []
    for phase, what in (("fill", "shared, 0 -> N containers"), ("exclusive", "Guaranteed, shrinks the pool"),
                        ("steady", "shared, at N containers")):
        s = result[phase]
        rows.append([phase, what, s["n"], s["p50_ms"], s["p99_ms"], s["max_ms"]])
    lines = [f"NRI CreateContainer hook through the plugin process, {result['containers']} containers "
             "(wall ms at the runtime double)",
             format_table(["phase", "containers", "n", "p50 ms", "p99 ms", "max ms"], rows, left=2),
             f"in the plugin (all creates): p99 <= {result['in_plugin_p99_ms']:g} ms (histogram bucket); "
             f"updates in hook replies: {result['updates_in_replies']}, unsolicited: {result['unsolicited']}; "
             f"plugin CPU per steady round (stop, remove, create): {result['steady_cpu_ms_per_round']:.2f} ms; "
             f"{result['targets'][0]['target']}: {result['targets'][0]['verdict']}"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_result(run()))
