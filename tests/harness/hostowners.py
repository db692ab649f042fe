"""Whose is a change under the guarded paths (tests/harness/hostguard.py): the test run's own
processes', or another process's on the machine (a relay installed on the node, another
checkout's test suite)?

A path's process is, for a socket, the process that holds it open (/proc/net/unix gives the
socket's inode, /proc/PID/fd the holder); else the process named in the nearest state
directory lock at or above it (`cri-resmgr relay (pid 1234)`, frontend/statelock.py): a
relay's state files are its lock holder's. That process is the run's when it descends from
the pytest process (its /proc/PID/stat parents). A path removed is judged by the process it
had when last seen. A change whose process cannot be found, or has ended before it could be
asked, counts as the run's: the guard fails a run it cannot clear rather than let a leak by.
A directory's own change (its mtime as entries come and go) follows its entries: it is
another's when each entry changed in it is another's.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

LOCK_NAME = "lock"
LOCK_PID = re.compile(rb"\(pid (\d+)\)")


class Owners:
    """Judges changes for one run (the pytest process `root`); remembers each path's process
    and each process's verdict, so that a path removed or a process ended is still judged."""

    def __init__(self, roots: Iterable[str], root_pid: int | None = None) -> None:
        self.roots = tuple(os.path.normpath(r) for r in roots)
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self.path_pid: dict[str, int] = {}
        self.ours: dict[int, bool] = {}

    def remember(self, paths: Iterable[str]) -> None:
        """Notes the process of each path that has one now (the snapshot at the start)."""
        listeners = _socket_holders() if any(_is_socket(p) for p in paths) else {}
        for path in paths:
            pid = self._pid(path, listeners)
            if pid is not None:
                self.path_pid[path] = pid
                self._verdict(pid)

    def others(self, changed: dict[str, str]) -> set[str]:
        """Of the changed paths (path -> `created`/`changed`/`removed`), the ones another
        process than the run's made."""
        listeners = _socket_holders() if any(_is_socket(p) for p in changed) else {}
        foreign: set[str] = set()
        dirs: list[str] = []
        for path, how in changed.items():
            if how != "removed" and os.path.isdir(path) and not os.path.islink(path):
                dirs.append(path)
                continue
            pid = None if how == "removed" else self._pid(path, listeners)
            pid = self.path_pid.get(path) if pid is None else pid
            if pid is None:
                continue
            self.path_pid[path] = pid
            if not self._verdict(pid):
                foreign.add(path)
        for path in sorted(dirs, key=len, reverse=True):  # the deepest first: a parent follows its children
            entries = [p for p in changed if os.path.dirname(p) == path]
            lock = os.path.join(path, LOCK_NAME)
            pid = _lock_pid(lock)
            by_lock = pid is not None and not self._verdict(pid) and all(
                p in foreign or p == lock for p in entries)
            if by_lock or (entries and all(p in foreign for p in entries)):
                foreign.add(path)
        return foreign

    def _pid(self, path: str, listeners: dict[str, int]) -> int | None:
        if path in listeners:
            return listeners[path]
        if _is_socket(path):
            return None  # a socket nobody holds: its maker is gone
        return self._lock_holder(path)

    def _lock_holder(self, path: str) -> int | None:
        here = os.path.normpath(path)
        while True:
            pid = _lock_pid(os.path.join(here, LOCK_NAME)) if os.path.isdir(here) else None
            if os.path.basename(here) == LOCK_NAME:
                pid = _lock_pid(here)
            if pid is not None:
                return pid
            if here in self.roots or os.path.dirname(here) == here:
                return None
            here = os.path.dirname(here)

    def _verdict(self, pid: int) -> bool:
        """Whether pid is the run's: a descendant of the pytest process, or gone (unknown)."""
        if pid not in self.ours:
            chain = _ancestors(pid)
            self.ours[pid] = chain is None or self.root_pid in chain
        return self.ours[pid]


def _ancestors(pid: int) -> list[int] | None:
    """pid and its parents up to the first process; None when pid is not running."""
    chain: list[int] = []
    while pid > 0 and pid not in chain:
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return None if not chain else chain
        chain.append(pid)
        # `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses, so from its last ')'.
        pid = int(fields[fields.rindex(b")") + 2:].split()[1])
    return chain


def _lock_pid(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            found = LOCK_PID.search(f.read(200))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _socket_holders() -> dict[str, int]:
    """Each bound unix socket's path to a process that holds it (one of them)."""
    inodes: dict[int, str] = {}
    try:
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                parts = line.split(None, 7)
                if len(parts) == 8:
                    inodes[int(parts[6])] = parts[7].strip()
    except OSError:
        return {}
    holders: dict[str, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    path = inodes.get(int(target[8:-1]))
                    if path is not None:
                        holders.setdefault(path, int(entry.name))
    return holders
