"""Scheduling classes on real processes: every thread of a process gets the class, read
back by the kernel's own calls, and a child forked after inherits it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cri_resmgr.classes.sched import DryRunScheduler, Syscalls, apply_all
from cri_resmgr.policy.schedclass import SchedClass

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_SYS_NICE) for fifo and nice < 0")

# Three threads, then (on its first line of stdin) a child forked, whose PID it prints.
PROGRAM = """
import os, sys, threading, time
for _ in range(2):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print(os.getpid(), flush=True)
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def proc():
    p = subprocess.Popen([sys.executable, "-c", PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    p.stdout.readline()
    children: list[int] = []
    yield p, children
    for pid in children:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    p.kill()
    p.wait()


def _tids(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def _threads_up(pid: int, n: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(tids := _tids(pid)) < n:
        assert time.monotonic() < deadline, tids
        time.sleep(0.01)
    return tids


def test_every_thread_and_a_later_child_carry_the_class(proc):
    p, children = proc
    calls = Syscalls()
    tids = _threads_up(p.pid, 3)
    cls = SchedClass("rt", policy="rr", priority=7, nice=-3, io_class="be", io_priority=2)
    done, refused = apply_all(calls, tids, cls)
    assert refused is None and sorted(done) == tids
    for tid in tids:  # read back by syscall: os.sched_getscheduler, sched_getparam, getpriority, ioprio_get
        assert os.sched_getscheduler(tid) == os.SCHED_RR
        assert os.sched_getparam(tid).sched_priority == 7
        assert os.getpriority(os.PRIO_PROCESS, tid) == -3
        c = calls.current(tid)
        assert (c.io_class, c.io_priority) == ("be", 2)
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("\n")
    p.stdin.flush()
    child = int(p.stdout.readline())
    children.append(child)
    assert calls.current(child) == calls.current(p.pid)  # forked later: inherited, nothing to do


def test_batch_idle_and_deadline_and_back():
    p = subprocess.Popen(["sleep", "60"])
    try:
        calls = Syscalls()
        for cls, want in [(SchedClass("b", policy="batch", nice=4, io_class="idle"), ("batch", 0, 4, "idle")),
                          (SchedClass("i", policy="idle"), ("idle", 0, 4, "idle")),
                          (SchedClass("d", policy="deadline", runtime_us=2000, deadline_us=10000, period_us=20000),
                           ("deadline", 0, 4, "idle")),
                          (SchedClass("o", policy="other", nice=0, io_class="be", io_priority=4),
                           ("other", 0, 0, "be"))]:
            assert apply_all(calls, [p.pid], cls) == ([p.pid], None)
            c = calls.current(p.pid)
            assert (c.policy, c.priority, c.nice, c.io_class) == want
    finally:
        p.kill()
        p.wait()


def test_a_refusal_is_returned_and_the_other_threads_still_set():
    calls = Syscalls()
    p = subprocess.Popen(["sleep", "60"])
    try:
        # A thread id that is no thread (gone) is skipped; pid 1's kthreadd-like refusal is
        # emulated by an invalid class for the kernel: deadline with runtime above period.
        bad = SchedClass("bad", policy="deadline", runtime_us=30000, deadline_us=30000, period_us=30000)
        worse = SchedClass("worse", policy="deadline", runtime_us=1, deadline_us=1)  # below the kernel's 1024 ns
        done, refused = apply_all(calls, [p.pid, 999_999_999], worse)
        assert done == [] and refused is not None
        done, refused = apply_all(calls, [999_999_999, p.pid], bad)
        assert done == [p.pid] and refused is None
    finally:
        p.kill()
        p.wait()


def test_dry_run_sets_nothing():
    p = subprocess.Popen(["sleep", "60"])
    try:
        dry = DryRunScheduler(Syscalls())
        assert apply_all(dry, [p.pid], SchedClass("x", policy="fifo", priority=5)) == ([p.pid], None)
        assert os.sched_getscheduler(p.pid) == os.SCHED_OTHER
    finally:
        p.kill()
        p.wait()
