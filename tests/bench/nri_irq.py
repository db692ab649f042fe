"""`make bench` section nri-irq: the NRI plugin's Synchronize with 100 running containers
under balloons on a node with 600 controllable IRQs (nri-plugins #746: balloons with 100
containers and 600+ IRQs overran the runtime's 2 s Synchronize timeout).

The real `cri-resmgr-nri` process against the runtime double (tests/nri/runtime_double.py)
on a generated 64-CPU machine whose -host-root also holds a kernel-like /proc
(tests/harness/procirq.py): 600 IRQs, each with every CPU in its smp_affinity_list. One
container in ten is Guaranteed in namespace `quiet`, whose balloon type isolates its
balloons' CPUs from every controllable IRQ. The same start without ControllableInterrupts
is the baseline. Figures: Synchronize wall ms at the double and the plugin's CPU ms over
it; how long after the reply every IRQ was off the isolated CPUs (the changes of 100 ms
are planned once, without I/O, and only changed IRQs written: not within Synchronize);
and that every IRQ has its affinity back after the plugin stops.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.bench.relay import format_table, proc_cpu_seconds
from tests.harness import sysfs
from tests.harness.procirq import affinities, kernel_like_proc
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod

TARGET_SYNC_MS = 200.0
BASE = ("policy:\n  Active: balloons\n  ReservedResources:\n    CPU: 2\n  balloons:\n{irqs}"
        "    BalloonTypes:\n"
        "      - {{Name: quiet, Namespaces: [quiet], PreferNewBalloons: true, MaxCPUs: 1{mode}}}\n"
        "      - {{Name: work, MinCPUs: 2, MaxCPUs: 16, MinBalloons: 1}}\n")


def config(irqs: int, first: int = 24) -> str:
    if not irqs:
        return BASE.format(irqs="", mode="")
    return BASE.format(irqs=f"    ControllableInterrupts: [\"{first}-{first + irqs - 1}\"]\n", mode=", IRQMode: isolate")


def _populate(double: RuntimeDouble, containers: int) -> None:
    for i in range(containers):
        pid = f"p{i}"
        if i % 10 == 5:
            double.pods[pid] = pod(pid, "guaranteed", namespace="quiet")
            double.containers[f"c{i}"] = guaranteed(f"c{i}", pid, 1)
        else:
            double.pods[pid] = pod(pid, "burstable")
            double.containers[f"c{i}"] = container(f"c{i}", pid, milli_cpu=100)


async def _start(double: RuntimeDouble, plugin: PluginProcess, host: Path, before: dict[int, str],
                 containers: int) -> dict[str, Any]:
    """Synchronize as nri_sync measures it, and how long after its reply every controllable
    IRQ was off the isolated balloons' CPUs (each IRQ's file polled)."""
    plugin.start()
    assert plugin.proc is not None
    pid = plugin.proc.pid
    double.clock = lambda: proc_cpu_seconds(pid)
    try:
        s = await double.wait_ready(count=1, timeout=120)
        placed_at = None
        if before:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = affinities(host)
                if all(now[n] != before[n] for n in before):
                    placed_at = time.monotonic()
                    break
                await asyncio.sleep(0.005)
    finally:
        await asyncio.to_thread(plugin.stop)
    t, cpu = s.times, s.cpu
    return {"sync_ms": (t["synchronized"] - t["sync_start"]) * 1e3,
            "sync_cpu_ms": (cpu["synchronized"] - cpu["sync_start"]) * 1e3,
            "placed": sum(1 for c in double.containers.values() if c.linux.resources.cpu.cpus),
            "irqs_ms": (placed_at - t["synchronized"]) * 1e3 if placed_at is not None else None}


def run_case(containers: int, irqs: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="crirm-bench-irq-", dir="/tmp"))
    try:
        host = work / "host"
        sysfs.generate(host, sockets=2, cores_per_die=16, threads_per_core=2)
        if irqs:
            kernel_like_proc(host, irqs, cpus=64)
        before = affinities(host) if irqs else {}
        plugin = PluginProcess(work, str(work / "nri.sock"), str(host), config=config(irqs))

        async def main() -> dict[str, Any]:
            double = RuntimeDouble(plugin.nri_socket)
            _populate(double, containers)
            await double.start()
            gc.collect()
            gc.freeze()
            try:
                return await _start(double, plugin, host, before, containers)
            finally:
                await double.close()

        result = asyncio.run(main())
        log = plugin.log()
        after = affinities(host) if irqs else {}
        result["irqs"] = irqs
        result["restored"] = after == before
        result["log_tail"] = log.splitlines()[-3:]
    finally:
        gc.unfreeze()
        shutil.rmtree(work, ignore_errors=True)
    return result


def run(containers: int = 100, irqs: int = 600) -> dict[str, Any]:
    cases = {"no IRQs": run_case(containers, 0), f"{irqs} IRQs": run_case(containers, irqs)}
    worst = max(c["sync_ms"] for c in cases.values())
    ok = all(c["placed"] == containers for c in cases.values()) and cases[f"{irqs} IRQs"]["restored"] \
        and cases[f"{irqs} IRQs"]["irqs_ms"] is not None
    return {"containers": containers, "cases": cases,
            "targets": [{"target": f"Synchronize with {containers} containers and {irqs} controllable IRQs <= "
                                   f"{TARGET_SYNC_MS:g} ms (every container placed, every IRQ restored after)",
                         "verdict": "PASS" if worst <= TARGET_SYNC_MS and ok else "MISS"}]}


def format_result(result: dict[str, Any]) -> str:
    rows = [[name, c["sync_ms"], c["sync_cpu_ms"], c["placed"],
             "-" if c["irqs_ms"] is None else c["irqs_ms"], "yes" if c.get("restored", True) else "NO"]
            for name, c in result["cases"].items()]
    target = result["targets"][0]
    return "\n".join([
        f"NRI plugin Synchronize under balloons with {result['containers']} running containers, 1 in 10 in an "
        "IRQ-isolating balloon (wall ms at the runtime double)",
        format_table(["case", "Synchronize ms", "(plugin CPU ms)", "placed", "IRQs moved, ms after the reply",
                      "IRQs restored at stop"], rows, left=1),
        f"{target['target']}: {target['verdict']}"])


if __name__ == "__main__":
    print(format_result(run()))
