"""Scheduling classes through the real plugin process and the runtime double: a container
whose pid is a real process (threads and all) has the class on every thread when the
StartContainer hook returns; with -nri-runtime-classes the CreateContainer reply names it
as NRI v0.11's adjustment; -dry-run sets nothing and says what it would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cri_resmgr.classes.sched import Syscalls
from cri_resmgr.topology import discover
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, pod

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for nice < 0")
CONFIG = """\
policy:
  Active: topology-aware
  ReservedResources: {CPU: 1}
  topology-aware:
    SchedulingClasses:
      - {Name: low, Policy: batch, Nice: 6, IOClass: be, IOPriority: 5}
    NamespaceSchedulingClasses: {"batch-*": low}
"""
THREADS = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(60,)).start()\n"


@pytest.fixture
def proc():
    p = subprocess.Popen([sys.executable, "-c", THREADS])
    while len(os.listdir(f"/proc/{p.pid}/task")) < 4:
        time.sleep(0.01)
    yield p
    p.kill()
    p.wait()


def _run(tmp_path: Path, proc: subprocess.Popen, args: tuple[str, ...]):
    import asyncio

    discover("/")  # the plugin reads this machine (its /proc holds the process)
    plugin = PluginProcess(tmp_path, str(tmp_path / "nri.sock"), "/", config=CONFIG, args=args)
    out = {}

    async def main() -> None:
        double = RuntimeDouble(plugin.nri_socket)
        await double.start()
        plugin.start()
        try:
            await double.wait_ready()
            p = pod("p1", "besteffort", namespace="batch-7")
            await double.run_pod(p)
            c = container("c1", "p1")
            c.pid = proc.pid
            out["reply"] = await double.create(c)
        finally:
            await asyncio.to_thread(plugin.stop)
            await double.close()

    asyncio.run(main())
    return out["reply"], plugin.log()


def test_every_thread_gets_the_class_and_the_adjustment_names_it(tmp_path, proc):
    reply, log = _run(tmp_path, proc, ("-nri-runtime-classes",))
    calls = Syscalls()
    for tid in (int(t) for t in os.listdir(f"/proc/{proc.pid}/task")):
        c = calls.current(tid)
        assert (c.policy, c.nice, c.io_class, c.io_priority) == ("batch", 6, "be", 5), log[-3000:]
    s = reply.adjust.linux.scheduler
    from cri_resmgr._proto import nri_api_pb2 as api
    assert (s.policy, s.nice) == (api.SCHED_BATCH, 6)
    assert "batch-7/pod-p1:ctr-c1: scheduling class low" in log


def test_dry_run_sets_nothing_and_says_what_it_would(tmp_path, proc):
    # What the process had before (inherited from whoever started the suite), not "other".
    before = Syscalls().current(proc.pid).policy
    reply, log = _run(tmp_path, proc, ("-dry-run",))
    assert Syscalls().current(proc.pid).policy == before, log[-3000:]
    assert "dry-run: would set batch-7/pod-p1:ctr-c1 (4 threads): batch, nice 6, I/O be 5" in log, \
        log[-3000:]
    assert not reply.adjust.linux.HasField("scheduler")  # not asked for (-nri-runtime-classes)
