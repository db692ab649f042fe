"""The cpuset a running container really has: its cgroup's, not its spec's.

containerd (and CRI-O) apply an UpdateContainerResources to a container that is
not yet running to its spec only. A container whose start was in flight then (its
task already made from the old spec) runs on the old cpuset, while everything the
runtime reports about it (ContainerStatus's resources, the verbose runtimeSpec)
shows the spec. So the periodic reconcile reads the cgroup: the container's init
pid comes once from the runtime port's detail of it (under CRI: "pid" of the verbose
ContainerStatus' info), its cpuset cgroup from
/proc/PID/cgroup, the values from cpuset.cpus and cpuset.mems there (cgroup v1's
cpuset hierarchy, else the unified one). A cgroup path that does not name the
container (a reused pid, a pid of another PID namespace) is not trusted; anything
unreadable is "unknown" (None), never a difference.

cpuset.cpus is what was asked for; what the kernel enforces is the effective set
(v2: cpuset.cpus.effective, v1: cpuset.effective_cpus): the asked-for set within the
parent's effective set. A parent cgroup narrowed by hand (a pod's, which the relay does
not own) leaves the container's cpuset.cpus as the policy wrote it and its tasks on the
narrower set; so the effective set is read too, and the ancestor that narrows it is named
(the highest whose effective set does not hold the container's cpuset.cpus).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cri_resmgr.classes import cgroups
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

# The longest /proc/PID/cgroup or cpuset file read: real ones are a few hundred bytes.
_MAX_READ = 64 * 1024


@dataclass(frozen=True)
class RealCpuset:
    cpus: CPUSet  # cpuset.cpus: what was asked for
    mems: CPUSet | None  # None: not readable
    effective: CPUSet | None = None  # what the kernel enforces; None: not readable
    narrowed_by: str | None = None  # the cgroup (path in the hierarchy) whose effective set narrows it

    @property
    def enforced(self) -> CPUSet:
        """The CPUs the container's tasks may run on."""
        return self.effective if self.effective is not None else self.cpus


class CgroupReader:
    """Reads real cpusets under `proc` (the host's /proc); the cgroup mounts are those
    `proc`/self/mountinfo lists, found once."""

    def __init__(self, proc: str = "/proc"):
        self._proc = Path(proc)
        self._mounts: tuple[_Mount | None, _Mount | None] | None = None  # (v1 cpuset, v2)

    def read(self, pid: int, container_id: str) -> RealCpuset | None:
        """The cpuset of `pid`'s cgroup if that cgroup is the container's; else None."""
        try:
            lines = _read(self._proc / str(pid) / "cgroup").splitlines()
        except OSError:
            return None
        v1, v2 = self.mounts()
        v1_path = v2_path = None
        for line in lines:
            hierarchy, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            if hierarchy == "0" and not controllers:
                v2_path = path
            elif "cpuset" in controllers.split(","):
                v1_path = path
        if v1_path is not None and v1 is not None:
            path, mount = v1_path, v1
        elif v2_path is not None and v2 is not None:
            path, mount = v2_path, v2
        else:
            return None
        if not cgroups.names(path, container_id):
            return None
        directory = mount.directory(path)
        if directory is None:
            return None
        try:
            cpus = _read(directory / "cpuset.cpus").strip()
            if not cpus:  # cgroup v2: never set here, so nothing to compare with
                return None
            real_cpus = CPUSet.parse(cpus)
        except (OSError, ValueError):
            return None
        try:
            mems: CPUSet | None = CPUSet.parse(_read(directory / "cpuset.mems")) or None
        except (OSError, ValueError):
            mems = None
        effective_name = "cpuset.effective_cpus" if mount is v1 else "cpuset.cpus.effective"
        effective = _cpus(directory / effective_name)
        narrowed_by = None
        if effective is not None and effective != real_cpus:
            narrowed_by = _narrowing(mount, path, real_cpus, effective_name)
        return RealCpuset(real_cpus, mems, effective, narrowed_by)

    def mounts(self) -> tuple[_Mount | None, _Mount | None]:
        if self._mounts is None:
            try:
                text = _read(self._proc / "self" / "mountinfo", 4 * 1024 * 1024)
            except OSError as e:
                log.warning("cannot read the cgroup mounts (%s): real cpusets are not checked", e)
                text = ""
            self._mounts = _cgroup_mounts(text)
        return self._mounts


@dataclass(frozen=True)
class _Mount:
    root: str  # the cgroup path the mount shows at its mount point
    point: Path

    def directory(self, path: str) -> Path | None:
        root = self.root.rstrip("/")
        if root and not (path == root or path.startswith(root + "/")):
            return None  # outside what this mount shows
        rel = path[len(root):].lstrip("/")
        if ".." in rel.split("/"):
            return None
        return self.point / rel


def _cgroup_mounts(mountinfo: str) -> tuple[_Mount | None, _Mount | None]:
    """(the v1 cpuset hierarchy, the unified hierarchy) from /proc/self/mountinfo."""
    v1 = v2 = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        mount = _Mount(_unescape(fields[3]), Path(_unescape(fields[4])))
        if fstype == "cgroup" and "cpuset" in options and v1 is None:
            v1 = mount
        elif fstype == "cgroup2" and v2 is None:
            v2 = mount
    return v1, v2


def _narrowing(mount: _Mount, path: str, cpus: CPUSet, effective_name: str) -> str:
    """The highest ancestor of cgroup `path` whose effective set does not hold `cpus`
    (there the narrowing is), or `path` itself (offline CPUs, the container's own)."""
    found = path
    parts = path.rstrip("/").split("/")
    for n in range(len(parts) - 1, 0, -1):
        above = "/".join(parts[:n]) or "/"
        directory = mount.directory(above)
        if directory is None:
            break  # above what this mount shows
        got = _cpus(directory / effective_name)
        if got is not None and not cpus <= got:
            found = above
    return found


def _cpus(path: Path) -> CPUSet | None:
    try:
        text = _read(path).strip()
        return CPUSet.parse(text) if text else None
    except (OSError, ValueError):
        return None


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _read(path: Path, limit: int = _MAX_READ) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode("ascii", "replace")
