"""The test suite must not touch the host's cri-resmgr: a run during which anything under
the paths a node install and a relay with default flags use (state directory and its
lock, sockets, configuration, the installed tree and units) was created, changed or
removed fails, naming the tests during which it happened and the paths (a plugin: `-p
tests.harness.hostguard` in setup.cfg). So does one during which the pytest process's own
scheduling policy, nice or I/O priority changed: a scheduling class must reach only the
test's processes.

A relay or plugin a test starts takes `-state-dir`, `-relay-socket` and the like under
the test's own directory; the default paths are the node's. Checking costs a few stat()
calls per test (these paths are missing or small on a test machine; an installed venv's
contents are not walked).

A change another process made (a relay running on the node, another checkout's suite on a
shared machine) does not fail the run: it is listed as such. Whose a change is, the run's
or another's, tests/harness/hostowners.py tells (a lock's or a socket's process, and
whether it descends from this pytest process).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pytest

from tests.harness.hostowners import Owners

# The defaults of cri_resmgr/config/settings.py and scripts/install-node.sh; the guard's own
# test points it elsewhere (colon-separated).
GUARDED = tuple(os.environ.get("CRIRM_HOSTGUARD_PATHS", "").split(":") if os.environ.get("CRIRM_HOSTGUARD_PATHS")
                else ("/var/lib/cri-resmgr", "/run/cri-resmgr", "/etc/cri-resmgr", "/opt/cri-resmgr"))
GUARDED_GLOBS = () if os.environ.get("CRIRM_HOSTGUARD_PATHS") else ("/etc/systemd/system/cri-resmgr*",)

Snapshot = dict[str, tuple[int, int, int]]  # path -> (inode, mtime_ns, size)


def own_scheduling() -> tuple[int, int, int]:
    """This pytest process's scheduling policy, nice and I/O priority: a scheduling class
    that reaches beyond a test's own processes (a cgroup matched too widely) changes them,
    as it would a node's other processes."""
    try:
        ioprio = _ioprio()
    except OSError:
        ioprio = -1
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0), ioprio


def _ioprio() -> int:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # ioprio_get(IOPRIO_WHO_PROCESS, 0): syscall 252 on x86_64, 31 on aarch64.
    import platform
    nr = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
    if nr is None:
        return -1
    value = libc.syscall(nr, 1, 0)
    if value < 0:
        raise OSError(ctypes.get_errno(), "ioprio_get")
    return int(value)


def snapshot() -> Snapshot:
    out: Snapshot = {}
    roots = list(GUARDED) + [p for g in GUARDED_GLOBS for p in glob.glob(g)]
    for root in roots:
        _add(out, root)
        if os.path.isdir(root) and not os.path.islink(root):
            for top, dirs, files in os.walk(root):
                for name in dirs + files:
                    _add(out, os.path.join(top, name))
                # An installed virtualenv (install-node.sh: $PREFIX/venv-*) holds tens of
                # thousands of files: walked twice per test it would add minutes to a run on
                # a node with cri-resmgr installed. Its directory is stat()ed (one made or
                # removed shows), its contents are not.
                dirs[:] = [d for d in dirs if not (top == root and d.startswith("venv-"))]
    return out


def _add(out: Snapshot, path: str) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return
    out[path] = (st.st_ino, st.st_mtime_ns, st.st_size)


def changed_paths(before: Snapshot, after: Snapshot) -> dict[str, str]:
    """Each path that changed, to `created`, `changed` or `removed`, in that order."""
    made = {p: "created" for p in sorted(after.keys() - before.keys())}
    changed = {p: "changed" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]}
    gone = {p: "removed" for p in sorted(before.keys() - after.keys())}
    return made | changed | gone


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    return [f"{how} {p}" for p, how in changed_paths(before, after).items()]


class HostGuard:
    """Snapshots the guarded paths around each test; at the end a run during which they
    changed fails (exit status 1), the report naming each test during which they did.
    The run fails rather than the test: a change the guard cannot tell from the run's (its
    process ended before it was asked) may be another process's, made while an innocent
    test ran. Changes another process made are listed and do not fail the run."""

    def __init__(self) -> None:
        self.touched: list[tuple[str, list[str]]] = []  # (test, changes): the run's, or unknown
        self.others: list[tuple[str, list[str]]] = []  # (test, changes) of processes outside the run
        self.owners = Owners(GUARDED)
        self.started = False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = snapshot()
        sched = own_scheduling()
        if not self.started:  # what is there at the start, and whose (a node's running relay)
            self.owners.remember(before)
            self.started = True
        yield
        now = own_scheduling()
        if now != sched:
            self.touched.append((item.nodeid, [f"this pytest process's scheduling (policy, nice, ioprio) {sched} -> {now}"
                                               " (put back)"]))
            _put_back(sched)
        found = changed_paths(before, snapshot())
        if not found:
            return
        foreign = self.owners.others(found)
        ours = [f"{how} {p}" for p, how in found.items() if p not in foreign]
        theirs = [f"{how} {p}" for p, how in found.items() if p in foreign]
        if ours:
            self.touched.append((item.nodeid, ours))
        if theirs:
            self.others.append((item.nodeid, theirs))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.touched and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        if self.others:
            tr.write_sep("-", "the host's cri-resmgr paths changed by processes outside the run (not a failure)")
            for nodeid, found in self.others:
                tr.write_line(f"during {nodeid}: {'; '.join(found)}")
        if not self.touched:
            return
        tr.write_sep("=", "the host's cri-resmgr paths or processes changed: the run fails", red=True)
        tr.write_line("give a relay or plugin -state-dir and sockets of the test's own (or another process "
                      "on the machine touched them meanwhile):")
        for nodeid, found in self.touched:
            tr.write_line(f"during {nodeid}: {'; '.join(found)}")


def _put_back(sched: tuple[int, int, int]) -> None:
    """The rest of the run as it started (a SCHED_BATCH pytest would pass its class on)."""
    policy, nice, _ = sched
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(HostGuard(), "hostguard")
