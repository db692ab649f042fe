"""Where a container's cgroups are: from /proc/PID/cgroup when the runtime tells its
PID (the kernel's own answer), else from the runtime spec's cgroupsPath (cgroupfs
"/kubepods/..." or systemd "slice:prefix:name" form). Paths are relative to the host
root, for `hostfs.HostFiles`."""

from __future__ import annotations

from dataclasses import dataclass

from cri_resmgr.classes.hostfs import HostFiles

CGROUP_ROOT = "sys/fs/cgroup"
# v1 hierarchies that hold every task of a container, tried in turn for its threads.
THREAD_CONTROLLERS = ("blkio", "pids", "cpu", "memory")


@dataclass(frozen=True)
class Where:
    """What the runtime told about a started container."""

    pid: int = 0
    cgroups_path: str = ""
    # The container's id: a /proc/PID/cgroup path that does not name it is not the
    # container's (its PID reused by another process) and is not written to.
    container_id: str = ""


def mode(files: HostFiles) -> str | None:
    """"v1" (a blkio hierarchy), "v2" (the unified hierarchy with the io controller) or None."""
    if files.exists(f"{CGROUP_ROOT}/blkio"):
        return "v1"
    if "io" in (files.read(f"{CGROUP_ROOT}/cgroup.controllers") or "").split():
        return "v2"
    return None


def container_dir(files: HostFiles, cgroup_mode: str, where: Where, controller: str = "blkio") -> str | None:
    """The container's own cgroup directory (in `controller`'s hierarchy on v1); None if not
    found. Never a hierarchy's root: no container lives there, every host process may."""
    for rel in _candidates(files, cgroup_mode, where, controller):
        if files.exists(rel):
            return rel
    return None


def threads(files: HostFiles, cgroup_mode: str, where: Where) -> list[int]:
    """The thread ids of the container's tasks ([] when its cgroup is gone)."""
    controllers = THREAD_CONTROLLERS if cgroup_mode == "v1" else ("",)
    name = "tasks" if cgroup_mode == "v1" else "cgroup.threads"
    for controller in controllers:
        d = container_dir(files, cgroup_mode, where, controller)
        text = files.read(f"{d}/{name}") if d is not None else None
        if text is not None:
            return [int(t) for t in text.split() if t.isdigit()]
    return []


def _candidates(files: HostFiles, cgroup_mode: str, where: Where, controller: str) -> list[str]:
    base = f"{CGROUP_ROOT}/{controller}" if cgroup_mode == "v1" else CGROUP_ROOT
    out = []
    text = files.read(f"proc/{where.pid}/cgroup") if where.pid > 0 else None
    for line in (text or "").splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (cgroup_mode == "v1" and controller in controllers.split(",")) or \
                (cgroup_mode == "v2" and hid == "0" and controllers == ""):
            if path.strip("/") and (not where.container_id or names(path, where.container_id)):
                out.append(base + path.rstrip("/"))
    if where.cgroups_path.strip("/"):
        out.append(base + "/" + systemd_path(where.cgroups_path).strip("/"))
    return out


def names(path: str, container_id: str) -> bool:
    """Whether a cgroup path is the container's own: one of its directories is the id
    (cgroupfs: .../pod<uid>/<id>) or a runtime's scope for it (cri-containerd-<id>.scope,
    crio-<id>.scope, docker-<id>.scope). A substring would not do: a short id (a test's
    "c1") is found inside unrelated paths, and a class then lands on every process of a
    host cgroup."""
    for part in path.split("/"):
        unit = part[: -len(".scope")] if part.endswith(".scope") else part
        if unit == container_id or unit.endswith("-" + container_id):
            return True
    return False


def systemd_path(cgroups_path: str) -> str:
    """"kubepods-besteffort-pod1.slice:cri-containerd:ID" as the directories systemd makes
    (kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-ID.scope);
    a cgroupfs path as it is."""
    parts = cgroups_path.split(":")
    if len(parts) != 3 or "/" in parts[0]:
        return cgroups_path
    slice_name, prefix, name = parts
    dirs = []
    if slice_name.endswith(".slice") and slice_name != "-.slice":
        words = slice_name[: -len(".slice")].split("-")
        dirs = ["-".join(words[: i + 1]) + ".slice" for i in range(len(words))]
    unit = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
    return "/".join([*dirs, unit])
