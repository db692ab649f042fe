"""Reading and removing real cgroups, for tests that check what runc applied.

Works on cgroup v1 (one hierarchy per controller, as on the CI VM) and knows
enough of v2 ("0::/path" lines, the unified mount) not to trip over it.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CgroupFiles",
    "cgroup_hierarchies",
    "cgroup_dirs",
    "cgroup_files_of_pid",
    "cpus_allowed_list",
    "kill_cgroup_tree",
    "remove_cgroup_tree",
]


def cgroup_hierarchies() -> dict[str, Path]:
    """Controller (or "name=..." / "" for v2) -> mount point of its hierarchy."""
    result: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        fstype, super_opts = fields[sep + 1], fields[sep + 3]
        mount_point = Path(fields[4])
        if fstype == "cgroup2":
            result.setdefault("", mount_point)
        elif fstype == "cgroup":
            for opt in super_opts.split(","):
                if opt not in ("rw", "ro") and not opt.startswith(("release_agent=", "clone_children", "xattr")):
                    result.setdefault(opt, mount_point)
    return result


def cgroup_dirs(cgroup_path: str) -> list[Path]:
    """The directories of `cgroup_path` (e.g. "/kubepods") that exist in any hierarchy."""
    mounts = {os.path.realpath(p): p for p in cgroup_hierarchies().values()}
    rel = cgroup_path.lstrip("/")
    return [Path(m) / rel for m in mounts.values() if rel and (Path(m) / rel).is_dir()]


@dataclass(frozen=True)
class CgroupFiles:
    """The cgroup directories a process lives in, by controller."""

    pid: int
    dirs: dict[str, Path]

    def read(self, controller: str, filename: str) -> str:
        if controller not in self.dirs:
            raise KeyError(f"process {self.pid} has no {controller!r} cgroup (controllers: {sorted(self.dirs)})")
        return (self.dirs[controller] / filename).read_text().strip()

    def cpuset_cpus(self) -> str:
        return self.read("cpuset", "cpuset.cpus")

    def cpuset_mems(self) -> str:
        return self.read("cpuset", "cpuset.mems")

    def cpu_shares(self) -> int:
        return int(self.read("cpu", "cpu.shares"))

    def cfs_quota_us(self) -> int:
        return int(self.read("cpu", "cpu.cfs_quota_us"))

    def cfs_period_us(self) -> int:
        return int(self.read("cpu", "cpu.cfs_period_us"))

    def memory_limit_in_bytes(self) -> int:
        return int(self.read("memory", "memory.limit_in_bytes"))


def cgroup_files_of_pid(pid: int) -> CgroupFiles:
    """Where process `pid` sits in each mounted hierarchy, from /proc/PID/cgroup."""
    hierarchies = cgroup_hierarchies()
    dirs: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            mount = hierarchies.get(controller)
            if mount is not None:
                dirs[controller] = mount / path.lstrip("/")
    return CgroupFiles(pid, dirs)


def cpus_allowed_list(pid: int) -> str:
    """The kernel's view of where `pid` may run (e.g. "0-1")."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"/proc/{pid}/status has no Cpus_allowed_list")


def kill_cgroup_tree(top: Path, timeout: float = 10.0) -> list[int]:
    """SIGKILLs every process in cgroup `top` and below; returns their PIDs."""
    pids: set[int] = set()
    for procs in [top / "cgroup.procs", *top.rglob("*/cgroup.procs")]:
        try:
            pids.update(int(p) for p in procs.read_text().split())
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return sorted(pids)


def remove_cgroup_tree(top: Path, busy_timeout: float = 5.0) -> list[str]:
    """rmdir `top` and its sub-cgroups, deepest first; returns what could not
    be removed (with the reason). Never kills anything."""
    if not top.is_dir():
        return []
    subdirs = [p for p in top.rglob("*") if p.is_dir()]
    failed = []
    for d in sorted(subdirs, key=lambda p: len(p.parts), reverse=True) + [top]:
        # A cgroup whose last task just died can stay busy for a moment.
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    failed.append(f"{d}: {e.strerror}")
                    break
                time.sleep(0.02)
    return failed


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
