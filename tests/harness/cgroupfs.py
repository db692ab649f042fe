"""Reading and removing real cgroups, for tests that check what runc applied; and
cgroup trees under a test's host root whose files take and refuse writes as the kernel's
do (`build_v2`, `v2_cgroup`, `disk`, `write_like_kernel`), for what these machines lack.

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

from cri_resmgr.topology.cpuset import CPUSet

__all__ = [
    "CgroupFiles",
    "cgroup_hierarchies",
    "cgroup_dirs",
    "build_v2",
    "cgroup_files_of_pid",
    "disk",
    "cpus_allowed_list",
    "kill_cgroup_tree",
    "remove_cgroup_tree",
    "v2_cgroup",
    "write_like_kernel",
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


# -- cgroup files under a test's host root, written as the kernel takes them ---------------------
#
# These machines are cgroup v1 with no BFQ or io.cost on their disks; the class controllers
# and the reconcile are tested on trees laid out as a v2 (or v1) node's, whose files refuse
# what the kernel refuses (resctrl.KernelLike calls `write_like_kernel` for them).

V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"
BFQ_MAX, IOCOST_MAX = 1000, 10000  # block/bfq-iosched.h BFQ_MAX_WEIGHT; CGROUP_WEIGHT_MAX


def build_v2(root: Path, cpus: str = "0-7", mems: str = "0") -> Path:
    """The unified hierarchy's root at `root`/sys/fs/cgroup: its controllers, its effective sets."""
    base = root / "sys/fs/cgroup"
    base.mkdir(parents=True, exist_ok=True)
    (base / "cgroup.controllers").write_text(V2_CONTROLLERS + "\n")
    (base / "cgroup.subtree_control").write_text(V2_CONTROLLERS + "\n")
    (base / "cpuset.cpus.effective").write_text(cpus + "\n")
    (base / "cpuset.mems.effective").write_text(mems + "\n")
    (base / "io.cost.qos").write_text("")
    return base


def v2_cgroup(root: Path, rel: str, bfq: bool = True, cpus: str = "") -> Path:
    """A v2 cgroup (and its parents) under the unified root, with the files of a kernel
    with io.cost and (`bfq`) the BFQ module: io.max, io.weight, io.bfq.weight, cpuset.*."""
    base = root / "sys/fs/cgroup"
    d = base
    for part in [p for p in rel.strip("/").split("/") if p]:
        d = d / part
        if not d.is_dir():
            d.mkdir()
            for name, text in (("io.max", ""), ("io.weight", "default 100\n"), ("cpuset.cpus", "\n"),
                               ("cpuset.mems", "\n"), ("cgroup.threads", ""), ("cgroup.procs", "")):
                (d / name).write_text(text)
            if bfq:
                (d / "io.bfq.weight").write_text("default 100\n")
    if cpus:
        (d / "cpuset.cpus").write_text(cpus + "\n")
    _effective(base)
    return d


def disk(root: Path, dev: str, scheduler: str = "mq-deadline", iocost: bool = False, name: str = "") -> None:
    """Block device `dev` ("254:0") as sysfs shows it: its directory (sys/dev/block/DEV and,
    when `name`d, sys/block/NAME link to it) with `dev` and its queue's schedulers, the active
    one in brackets; `iocost`: io.cost enabled for it in the v2 root's io.cost.qos."""
    known = root / "sys/dev/block" / dev
    d = known.resolve() if known.exists() else root / "sys/devices/virtual/block" / (name or dev.replace(":", "_"))
    (d / "queue").mkdir(parents=True, exist_ok=True)
    (d / "dev").write_text(dev + "\n")
    (d / "queue/scheduler").write_text(" ".join(f"[{s}]" if s == scheduler else s
                                                for s in ("none", "mq-deadline", "kyber", "bfq")) + "\n")
    for link in [root / "sys/dev/block" / dev] + ([root / "sys/block" / name] if name else []):
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(d)
    qos = root / "sys/fs/cgroup/io.cost.qos"
    if iocost and qos.parent.is_dir():
        qos.write_text(qos.read_text() + f"{dev} enable=1 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 "
                       "wlat=250000 min=1.00 max=10000.00\n")


def write_like_kernel(root: Path, path: Path, text: str) -> bool:
    """Does to a cgroup file what the kernel does with one write(2) of `text`, raising the
    kernel's errors: False when `path` is no file this knows (the caller writes it plainly)."""
    name = path.name
    v1 = not (root / "sys/fs/cgroup/cgroup.controllers").exists()  # the unified hierarchy's root file
    known = name.startswith("blkio.") or name.startswith("io.") or (name == "cpuset.cpus" and not v1)
    if known and not path.exists():  # cgroup files are the kernel's: a write never makes one
        raise OSError(errno.ENOENT, "No such file or directory")
    if name.startswith("blkio.throttle.") and name.endswith("_device"):
        _one_line(text)
        dev, value = _split(text)
        _device(root, dev)
        _set_rule(path, dev, None if value == "0" else value, header=False)
    elif name in ("blkio.bfq.weight_device", "blkio.weight_device", "io.bfq.weight", "io.weight"):
        _weight(root, path, text, v1)
    elif name in ("blkio.bfq.weight", "blkio.weight"):
        _one_line(text)
        _range(text.strip(), BFQ_MAX)
        path.write_text(text.strip() + "\n")
        twin = path.with_name(name + "_device")
        if name == "blkio.bfq.weight" and twin.exists():  # one value, shown by both files
            lines = twin.read_text().splitlines()[1:]
            twin.write_text("".join(f"{x}\n" for x in [f"default {text.strip()}", *lines]))
    elif name == "io.max":
        _one_line(text)
        dev, rest = _split(text)
        _device(root, dev)
        old = dict(_rules(path, False)).get(dev, "rbps=max wbps=max riops=max wiops=max")
        values = dict(item.split("=") for item in old.split())
        for item in rest.split():
            key, _, value = item.partition("=")
            if key not in values or not (value == "max" or value.isdigit()):
                raise OSError(errno.EINVAL, "Invalid argument")
            values[key] = value
        line = " ".join(f"{k}={v}" for k, v in values.items())
        _set_rule(path, dev, None if all(v == "max" for v in values.values()) else line, header=False)
    elif name == "cpuset.cpus" and not v1:
        if not text.strip() and path.read_text().strip() and _populated(path.parent):
            raise OSError(errno.ENOSPC, "No space left on device")  # cpuset's validate_change: tasks need CPUs
        path.write_text(text.strip() + "\n")
        _effective(root / "sys/fs/cgroup")
    else:
        return False
    return True


def _weight(root: Path, path: Path, text: str, v1: bool) -> None:
    """BFQ's (bfq_io_set_weight) and io.cost's (ioc_weight_write) weight files, and CFQ's
    blkio.weight_device: "default N" or "N" is the cgroup's own weight, taken whatever the
    disks' schedulers; "MAJ:MIN N" needs the device under that policy (EOPNOTSUPP else)."""
    _one_line(text)
    bfq = "bfq" in path.name
    top = BFQ_MAX if bfq or v1 else IOCOST_MAX
    header = path.name != "blkio.weight_device"  # CFQ's shows the devices only
    words = text.split()
    if ":" not in text and path.name != "blkio.weight_device":
        value = words[-1] if words[0] == "default" and len(words) == 2 else words[0] if len(words) == 1 else ""
        _range(value, top)
        lines = [x for x in path.read_text().splitlines() if not x.startswith("default ")]
        path.write_text("".join(f"{x}\n" for x in [f"default {value}", *lines]))
        return
    dev, value = _split(text)
    _device(root, dev)
    wanted = "bfq" if bfq else "cfq" if v1 else "iocost"
    if wanted not in _policies(root, dev):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    if value == "default" and path.name != "blkio.weight_device":
        _set_rule(path, dev, None, header)
        return
    if value == "0" and path.name == "blkio.weight_device":  # CFQ: 0 removes the device's weight
        _set_rule(path, dev, None, header)
        return
    if value == "0" and bfq:
        raise OSError(errno.ERANGE, "Numerical result out of range")  # BFQ wants "default"
    _range(value, top)
    _set_rule(path, dev, f"{dev} {value}", header)


def _policies(root: Path, dev: str) -> set[str]:
    """The weight policies a device is under: its active scheduler (bfq, cfq), io.cost."""
    text = (root / "sys/dev/block" / dev / "queue/scheduler").read_text()
    out = {w.strip("[]") for w in text.split() if w.startswith("[")}
    qos = root / "sys/fs/cgroup/io.cost.qos"
    if qos.exists() and any(x.split()[:2] == [dev, "enable=1"] for x in qos.read_text().splitlines()):
        out.add("iocost")
    return out


def _device(root: Path, dev: str) -> None:
    if not (root / "sys/dev/block" / dev).is_dir():
        raise OSError(errno.ENODEV, "No such device")
    if not (root / "sys/dev/block" / dev / "queue").is_dir():  # a partition: the kernel wants the disk
        raise OSError(errno.ENODEV, "No such device")


def _one_line(text: str) -> None:
    if len([x for x in text.splitlines() if x.strip()]) != 1:  # the kernel parses one line a write
        raise OSError(errno.EINVAL, "Invalid argument")


def _split(text: str) -> tuple[str, str]:
    dev, _, rest = text.strip().partition(" ")
    major, _, minor = dev.partition(":")
    if not (major.isdigit() and minor.isdigit() and rest.strip()):
        raise OSError(errno.EINVAL, "Invalid argument")
    return dev, rest.strip()


def _range(value: str, top: int) -> None:
    if not value.isdigit():
        raise OSError(errno.EINVAL, "Invalid argument")
    if not 1 <= int(value) <= top:
        raise OSError(errno.ERANGE, "Numerical result out of range")


def _rules(path: Path, header: bool) -> list[tuple[str, str]]:
    lines = path.read_text().splitlines()
    return [(x.split()[0], x.split(" ", 1)[1]) for x in lines[1 if header else 0:] if x.strip()]


def _set_rule(path: Path, dev: str, line: str | None, header: bool) -> None:
    """The device's line replaced (None: removed); the devices in order, as the kernel lists them."""
    lines = path.read_text().splitlines()
    head = lines[:1] if header and lines else []
    rules = dict(_rules(path, header))
    rules.pop(dev, None)
    if line is not None:
        rules[dev] = line.split(" ", 1)[1] if line.startswith(dev + " ") else line
    body = [f"{d} {v}" for d, v in sorted(rules.items(), key=lambda r: tuple(int(n) for n in r[0].split(":")))]
    path.write_text("".join(f"{x}\n" for x in head + body))


def _populated(d: Path) -> bool:
    """Whether cgroup `d` or one below it has a process (cgroup.events' "populated 1")."""
    return any(p.read_text().strip() for p in [d / "cgroup.procs", *d.rglob("*/cgroup.procs")] if p.exists())


def _effective(base: Path) -> None:
    """Every cgroup's cpuset.cpus.effective under the v2 root `base`, as the kernel keeps them: its
    own cpuset.cpus within its parent's effective set (the parent's when unset or disjoint)."""
    def walk(d: Path, parent: CPUSet) -> None:
        own = (d / "cpuset.cpus").read_text().strip() if (d / "cpuset.cpus").exists() else ""
        eff = CPUSet.parse(own) & parent if own else parent
        eff = eff or parent
        (d / "cpuset.cpus.effective").write_text(f"{eff}\n")
        for sub in sorted(p for p in d.iterdir() if p.is_dir()):
            walk(sub, eff)

    top = CPUSet.parse((base / "cpuset.cpus.effective").read_text().strip())
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        walk(sub, top)
