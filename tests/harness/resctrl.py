"""A resctrl tree under a test's host root, built and behaving like the kernel's, for
machines without RDT (these have none); cgroup files written through it behave as the
kernel's too (cgroupfs.write_like_kernel: block I/O rules, weights, v2 cpusets).

`build` lays out `sys/fs/resctrl` as the kernel shows it (info/L3 and info/MB with
cbm_mask, min_cbm_bits, num_closids, min_bandwidth, bandwidth_gran; the root group's
schemata and tasks). `KernelLike` is the class controllers' `HostFiles` over that
tree, doing what the kernel does where a plain directory cannot: mkdir of a group
makes its files (and fails with ENOSPC when the CLOSes run out), a schemata write is
checked as the kernel checks it (contiguous masks of at least min_cbm_bits inside
cbm_mask, known domain ids, bandwidth within range) and merged, a write to `tasks`
moves one thread from whichever group held it, rmdir gives a group's tasks back to
the root group. Every write is recorded in `writes`.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from cri_resmgr.classes.hostfs import HostRoot
from tests.harness import cgroupfs

RESCTRL = "sys/fs/resctrl"


def build(root: Path, cbm_mask: str = "fffff", min_cbm_bits: int = 2, num_closids: int = 4,
          cache_ids: tuple[int, ...] = (0, 1), mb: bool = True, min_bandwidth: int = 10,
          bandwidth_gran: int = 10, tasks: tuple[int, ...] = (1,)) -> Path:
    base = root / RESCTRL
    (base / "info" / "L3").mkdir(parents=True)
    for name, value in (("cbm_mask", cbm_mask), ("min_cbm_bits", min_cbm_bits), ("num_closids", num_closids),
                        ("shareable_bits", "0")):
        (base / "info" / "L3" / name).write_text(f"{value}\n")
    lines = ["L3:" + ";".join(f"{i}={cbm_mask}" for i in cache_ids)]
    if mb:
        (base / "info" / "MB").mkdir()
        for name, value in (("min_bandwidth", min_bandwidth), ("bandwidth_gran", bandwidth_gran),
                            ("num_closids", num_closids), ("delay_linear", 1)):
            (base / "info" / "MB" / name).write_text(f"{value}\n")
        lines.append("MB:" + ";".join(f"{i}=100" for i in cache_ids))
    (base / "schemata").write_text("\n".join(lines) + "\n")
    (base / "tasks").write_text("".join(f"{t}\n" for t in tasks))
    (base / "cpus").write_text("3\n")
    return base


class KernelLike(HostRoot):
    def __init__(self, root: str):
        super().__init__(root)
        self.writes: list[tuple[str, str]] = []

    def _resctrl(self) -> Path:
        return Path(self.root) / RESCTRL

    def _is_group(self, rel: str) -> bool:
        parent = Path(rel.strip("/")).parent
        return str(parent) == RESCTRL

    def mkdir(self, rel: str) -> None:
        if not self._is_group(rel):
            return super().mkdir(rel)
        base = self._resctrl()
        groups = [d for d in base.iterdir() if d.is_dir() and d.name not in ("info", "mon_groups", "mon_data")]
        closids = int((base / "info" / "L3" / "num_closids").read_text())
        if len(groups) + 1 >= closids:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().mkdir(rel)
        d = Path(self._path(rel))
        (d / "schemata").write_text((base / "schemata").read_text())
        (d / "tasks").write_text("")
        (d / "cpus").write_text("0\n")
        return None

    def rmdir(self, rel: str) -> None:
        if not self._is_group(rel):
            return super().rmdir(rel)
        d = Path(self._path(rel))
        moved = (d / "tasks").read_text()
        with open(self._resctrl() / "tasks", "a") as f:
            f.write(moved)
        shutil.rmtree(d)
        return None

    def write(self, rel: str, text: str) -> None:
        self.writes.append((rel, text))
        path = Path(self._path(rel))
        if cgroupfs.write_like_kernel(Path(self.root), path, text):
            return None
        if path.parent == self._resctrl() or path.parent.parent == self._resctrl():
            if path.name == "schemata":
                return self._schemata(path, text)
            if path.name == "tasks":
                return self._task(path, text)
        return super().write(rel, text)

    def _schemata(self, path: Path, text: str) -> None:
        info = self._resctrl() / "info"
        current = _parse(path.read_text())
        for kind, values in _parse(text).items():
            if kind not in current:
                raise OSError(errno.EINVAL, f"unknown resource {kind}")
            for i, v in values.items():
                if i not in current[kind]:
                    raise OSError(errno.EINVAL, f"unknown domain {i}")
                if kind == "L3":
                    mask, full = int(v, 16), int((info / "L3" / "cbm_mask").read_text(), 16)
                    low = mask & -mask
                    if mask == 0 or mask & ~full or (mask + low) & mask or \
                            bin(mask).count("1") < int((info / "L3" / "min_cbm_bits").read_text()):
                        raise OSError(errno.EINVAL, f"invalid cache mask {v}")
                if kind == "MB":
                    bw, gran = int(v), int((info / "MB" / "bandwidth_gran").read_text())
                    if not int((info / "MB" / "min_bandwidth").read_text()) <= bw <= 100 or bw % gran:
                        raise OSError(errno.EINVAL, f"invalid bandwidth {v}")
                current[kind][i] = v
        path.write_text("".join(kind + ":" + ";".join(f"{i}={v}" for i, v in sorted(values.items())) + "\n"
                                for kind, values in current.items()))

    def _task(self, path: Path, text: str) -> None:
        tid = int(text.strip())  # one per write, as the kernel takes them
        for tasks in [self._resctrl() / "tasks", *self._resctrl().glob("*/tasks")]:
            held = [t for t in tasks.read_text().split() if int(t) != tid]
            tasks.write_text("".join(f"{t}\n" for t in held))
        with open(path, "a") as f:
            f.write(f"{tid}\n")


def _parse(text: str) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(":")
        if kind:
            out[kind] = {int(i): v for i, _, v in (item.partition("=") for item in rest.split(";"))}
    return out
