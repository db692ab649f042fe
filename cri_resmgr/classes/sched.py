"""Puts a scheduling class on threads, by the kernel's own calls: sched_setattr(2) (policy,
priority, flags, nice; deadline's runtime, deadline and period), setpriority(2) (nice)
and ioprio_set(2) (I/O class and priority), each on one thread id: the kernel keeps
them per thread, and a thread created later inherits its creator's (exec keeps them).

`Syscalls` is the real interface, `DryRunScheduler` the one -dry-run gets (it says what it
would set, once per container). Both read back with `current` (os.sched_getscheduler,
os.sched_getparam, os.getpriority, ioprio_get)."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
from dataclasses import dataclass
from typing import Protocol

from cri_resmgr.policy.schedclass import SchedClass

log = logging.getLogger(__name__)

POLICY_NUMBERS = {"other": 0, "fifo": 1, "rr": 2, "batch": 3, "idle": 5, "deadline": 6}
POLICY_NAMES = {v: k for k, v in POLICY_NUMBERS.items()}
FLAG_BITS = {"reset-on-fork": 0x01, "reclaim": 0x02, "dl-overrun": 0x04, "keep-policy": 0x08,
             "keep-params": 0x10}
IO_CLASS_NUMBERS = {"none": 0, "rt": 1, "be": 2, "idle": 3}
IO_CLASS_NAMES = {v: k for k, v in IO_CLASS_NUMBERS.items()}
IOPRIO_CLASS_SHIFT = 13
IOPRIO_WHO_PROCESS = 1
# sched_setattr, ioprio_set, ioprio_get by architecture (asm/unistd.h).
SYSCALLS = {"x86_64": (314, 251, 252), "aarch64": (274, 30, 31), "arm64": (274, 30, 31)}


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64)]


@dataclass(frozen=True)
class Current:
    """What a thread has now."""

    policy: str
    priority: int
    nice: int
    io_class: str
    io_priority: int


class Scheduler(Protocol):
    def apply(self, tid: int, cls: SchedClass) -> None: ...  # raises OSError (ESRCH: gone)
    def current(self, tid: int) -> Current: ...
    @property
    def dry_run(self) -> bool: ...


def _numbers() -> tuple[int, int, int]:
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(errno.ENOSYS, f"scheduling classes: no syscall numbers for {platform.machine()}")
    return numbers


class Syscalls:
    """The real calls, on the host's thread ids."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)

    @property
    def dry_run(self) -> bool:
        return False

    def _call(self, number: int, *args: object) -> int:
        result = int(self._libc.syscall(ctypes.c_long(number), *args))
        if result < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        return result

    def apply(self, tid: int, cls: SchedClass) -> None:
        setattr_nr, ioprio_set_nr, _ = _numbers()
        if cls.policy != "none":
            attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=POLICY_NUMBERS[cls.policy])
            for flag in cls.flags:
                attr.sched_flags |= FLAG_BITS[flag]
            attr.sched_nice = cls.nice if cls.nice is not None else os.getpriority(os.PRIO_PROCESS, tid)
            attr.sched_priority = cls.priority if cls.policy in ("fifo", "rr") else 0
            if cls.policy == "deadline":  # the class's microseconds, the kernel's nanoseconds
                attr.sched_runtime = cls.runtime_us * 1000
                attr.sched_deadline = cls.deadline_us * 1000
                attr.sched_period = (cls.period_us or cls.deadline_us) * 1000
            self._call(setattr_nr, ctypes.c_int(tid), ctypes.byref(attr), ctypes.c_uint(0))
        if cls.nice is not None:
            os.setpriority(os.PRIO_PROCESS, tid, cls.nice)
        if cls.io_class != "none":
            value = (IO_CLASS_NUMBERS[cls.io_class] << IOPRIO_CLASS_SHIFT) | \
                (cls.io_priority if cls.io_class != "idle" else 0)
            self._call(ioprio_set_nr, ctypes.c_int(IOPRIO_WHO_PROCESS), ctypes.c_int(tid), ctypes.c_int(value))

    def current(self, tid: int) -> Current:
        _, _, ioprio_get_nr = _numbers()
        policy = os.sched_getscheduler(tid)
        value = self._call(ioprio_get_nr, ctypes.c_int(IOPRIO_WHO_PROCESS), ctypes.c_int(tid))
        return Current(policy=POLICY_NAMES.get(policy & 0xff, str(policy)),
                       priority=os.sched_getparam(tid).sched_priority,
                       nice=os.getpriority(os.PRIO_PROCESS, tid),
                       io_class=IO_CLASS_NAMES.get(value >> IOPRIO_CLASS_SHIFT, "none"),
                       io_priority=value & ((1 << IOPRIO_CLASS_SHIFT) - 1))


class DryRunScheduler:
    """-dry-run: reads, sets nothing (the controller logs what it would set)."""

    def __init__(self, real: Scheduler):
        self._real = real

    @property
    def dry_run(self) -> bool:
        return True

    def apply(self, tid: int, cls: SchedClass) -> None:
        return None

    def current(self, tid: int) -> Current:
        return self._real.current(tid)


def apply_all(scheduler: Scheduler, tids: list[int], cls: SchedClass) -> tuple[list[int], OSError | None]:
    """`cls` on every thread of `tids`: the ones set, and the first refusal (a thread that
    ended meanwhile is no refusal). Every thread is tried: one refused is no reason to
    leave the others as they were."""
    done: list[int] = []
    first: OSError | None = None
    for tid in tids:
        try:
            scheduler.apply(tid, cls)
        except ProcessLookupError:
            continue
        except OSError as e:
            if e.errno == errno.ESRCH:
                continue
            first = first or e
            continue
        done.append(tid)
    return done, first
