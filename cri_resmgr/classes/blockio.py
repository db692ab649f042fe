"""Writes a block I/O class's rules into a container's own blkio cgroup (not the pod's:
on cgroup v1 a rule on the parent does not throttle a child's direct writes), and clears
what a class change removed. v1: `blkio.throttle.*_device`, `blkio.bfq.weight_device`
and/or `blkio.weight_device`, `blkio.bfq.weight` and/or `blkio.weight`; v2: `io.max`,
`io.weight` and `io.bfq.weight` where present.

Each line goes in its own write(2), and a line the kernel refuses stops nothing: the
others are still written (a per-device weight on a disk whose scheduler is not BFQ, say,
is refused with EOPNOTSUPP while the cgroup's `default N` is taken). A weight goes into
every weight file the cgroup has: BFQ reads its own (`io.bfq.weight`), io.cost the other
(`io.weight`), and each refuses a device that is not under it, so a per-device weight is
refused only when no file took it."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.classes.cgroups import CGROUP_ROOT
from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.config.classes import BlockioRule

KEYS = ("rbps", "wbps", "riops", "wiops")
V1_THROTTLE = {"rbps": "blkio.throttle.read_bps_device", "wbps": "blkio.throttle.write_bps_device",
               "riops": "blkio.throttle.read_iops_device", "wiops": "blkio.throttle.write_iops_device"}
V1_DEVICE_WEIGHT = ("blkio.bfq.weight_device", "blkio.weight_device")
V1_WEIGHT = ("blkio.bfq.weight", "blkio.weight")
V2_WEIGHT = ("io.bfq.weight", "io.weight")
DEFAULT_WEIGHT = {"blkio.bfq.weight": 100, "blkio.weight": 500, "io.bfq.weight": 100, "io.weight": 100}
# What removes a device's weight: BFQ and io.cost take "MAJ:MIN default" (BFQ refuses 0
# with ERANGE), CFQ took "MAJ:MIN 0".
CLEAR_DEVICE_WEIGHT = {"blkio.bfq.weight_device": "default", "blkio.weight_device": "0",
                       "io.bfq.weight": "default", "io.weight": "default"}


@dataclass(frozen=True)
class Limits:
    """A class resolved on this machine: per device ("MAJ:MIN") its throttles and
    weight, and the cgroup's own weight."""

    devices: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    weight: int | None = None


NONE = Limits()


def resolve(rules: Iterable[BlockioRule], files: HostFiles) -> tuple[Limits, list[str]]:
    """The rules with their device globs resolved to major:minor (a later rule wins for
    the same device); the second value names globs that matched no block device."""
    devices: dict[str, dict[str, int]] = {}
    weight = None
    unmatched = []
    for r in rules:
        values = {k: v for k, v in zip(KEYS, (r.throttle_read_bps, r.throttle_write_bps,
                                              r.throttle_read_iops, r.throttle_write_iops), strict=True)
                  if v is not None}
        if not r.devices:
            weight = r.weight if r.weight is not None else weight
            continue
        if r.weight is not None:
            values["weight"] = r.weight
        for glob in r.devices:
            found = [d for d in (files.block_device(p) for p in files.glob(glob)) if d is not None]
            if not found:
                unmatched.append(glob)
            for major, minor in found:
                devices.setdefault(f"{major}:{minor}", {}).update(values)
    return Limits(devices=devices, weight=weight), unmatched


@dataclass(frozen=True)
class Refusal:
    """A line the kernel did not take: the file's name and full path, the line, and why
    ("EOPNOTSUPP (Operation not supported)")."""

    name: str
    path: str
    line: str
    reason: str

    def __str__(self) -> str:
        return f"{self.line!r} into {self.path}: {self.reason}"


@dataclass(frozen=True)
class Written:
    """What one `write` did: the lines written ("FILE: TEXT") and those refused."""

    done: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()


# One thing to write: the (file, line) alternatives it may go to, every one tried; it is
# refused only when none took it (a device's weight, offered to BFQ's file and io.cost's).
_Step = tuple[tuple[str, str], ...]


class BlkioWriter:
    """`note` hears every line written or refused, for the dump."""

    def __init__(self, files: HostFiles, cgroup_mode: str, note: Callable[[str], None] | None = None):
        self._files = files
        self.mode = cgroup_mode
        self._note = note

    def missing(self, cgroup_dir: str) -> list[str]:
        """The files a class may need that `cgroup_dir` lacks (checked once at start-up)."""
        if self.mode == "v1":
            wanted = [*V1_THROTTLE.values(), V1_DEVICE_WEIGHT, V1_WEIGHT]
        else:
            wanted = ["io.max", V2_WEIGHT]
        out = []
        for w in wanted:
            names = (w,) if isinstance(w, str) else w
            if not any(self._files.exists(f"{cgroup_dir}/{n}") for n in names):
                out.append(" or ".join(names))
        return out

    def write(self, cgroup_dir: str, new: Limits, who: str = "") -> Written:
        """Makes the cgroup hold `new` as far as the kernel takes it, clearing the rules it
        holds that `new` has not: only what differs is written, each line on its own, and a
        refused line is returned, not raised, the rest written all the same."""
        done: list[str] = []
        refused: list[Refusal] = []
        for step in self._plan(cgroup_dir, new):
            failed = []
            for name, text in step:
                rel = f"{cgroup_dir}/{name}"
                try:
                    self._files.write(rel, text)
                except OSError as e:
                    failed.append(Refusal(name, self._files.show(rel), text, _reason(e)))
                    continue
                done.append(f"{name}: {text}")
                if self._note is not None:
                    self._note(f"blockio {who}: wrote {text!r} to {self._files.show(rel)}")
            if len(failed) == len(step):
                refused += failed
                if self._note is not None:
                    for r in failed:
                        self._note(f"blockio {who}: the kernel refused {r}")
        return Written(tuple(done), tuple(refused))

    def _plan(self, cgroup_dir: str, new: Limits) -> list[_Step]:
        v1 = self.mode == "v1"
        device_files = self._present(cgroup_dir, V1_DEVICE_WEIGHT if v1 else V2_WEIGHT)
        weight_files = self._present(cgroup_dir, V1_WEIGHT if v1 else V2_WEIGHT)
        throttles = self._throttles(cgroup_dir)
        weights = {f: dict(_device_lines(self._files.read(f"{cgroup_dir}/{f}"))) for f in device_files}
        steps: list[_Step] = []
        for dev in sorted(set(new.devices) | set(throttles) | {d for w in weights.values() for d in w}):
            want, had = new.devices.get(dev, {}), throttles.get(dev, {})
            if v1:
                for key in KEYS:
                    if key in want and want[key] != had.get(key):
                        steps.append(((V1_THROTTLE[key], f"{dev} {want[key]}"),))
                    elif key in had and key not in want:
                        steps.append(((V1_THROTTLE[key], f"{dev} 0"),))  # removes the rule
            elif any(want.get(k) != had.get(k) for k in KEYS):
                steps.append((("io.max", f"{dev} " + " ".join(f"{k}={want.get(k, 'max')}" for k in KEYS)),))
            steps += _device_weight(dev, want.get("weight"), {f: w.get(dev) for f, w in weights.items()})
        for f in weight_files:
            value = new.weight if new.weight is not None else DEFAULT_WEIGHT[f]
            if _cgroup_weight(self._files.read(f"{cgroup_dir}/{f}")) != value:
                steps.append(((f, str(value) if v1 else f"default {value}"),))
        return steps

    def _present(self, cgroup_dir: str, names: tuple[str, ...]) -> tuple[str, ...]:
        """Those of `names` the cgroup has; none: the last (its write fails, and says so)."""
        return tuple(n for n in names if self._files.exists(f"{cgroup_dir}/{n}")) or names[-1:]

    def _throttles(self, cgroup_dir: str) -> dict[str, dict[str, int]]:
        """The throttles the cgroup holds now, by device."""
        devices: dict[str, dict[str, int]] = {}
        if self.mode == "v1":
            for key, name in V1_THROTTLE.items():
                for dev, value in _device_lines(self._files.read(f"{cgroup_dir}/{name}")):
                    if value.isdigit():
                        devices.setdefault(dev, {})[key] = int(value)
        else:
            for dev, value in _device_lines(self._files.read(f"{cgroup_dir}/io.max")):
                for item in value.split():
                    k, _, v = item.partition("=")
                    if k in KEYS and v.isdigit():
                        devices.setdefault(dev, {})[k] = int(v)
        return devices


def weight_unsupported(files: HostFiles, cgroup_mode: str | None, dev: str) -> str | None:
    """Why the kernel will refuse a per-device weight for `dev` ("MAJ:MIN"): its I/O
    scheduler is not BFQ (nor CFQ, on v1) and, on v2, io.cost is not enabled for it. None
    when one of them takes it, or when this cannot tell (no queue/scheduler: a partition,
    or no sysfs under the host root); the kernel's own answer to the write tells then."""
    rel = f"sys/dev/block/{dev}/queue/scheduler"
    text = files.read(rel)
    active = next((w.strip("[]") for w in (text or "").split() if w.startswith("[")), None)
    if active is None or active in ("bfq", "cfq"):
        return None
    if cgroup_mode != "v2":
        return f"the I/O scheduler of {dev} is {active}, not bfq ({files.show(rel)})"
    qos = f"{CGROUP_ROOT}/io.cost.qos"
    if any(line.split()[:2] == [dev, "enable=1"] for line in (files.read(qos) or "").splitlines()):
        return None
    return (f"the I/O scheduler of {dev} is {active}, not bfq ({files.show(rel)}), and io.cost is not enabled "
            f"for it ({files.show(qos)}): a per-device weight needs one of them")


# Block devices no weight is meant for: loop devices, RAM disks.
_VIRTUAL = ("loop", "ram", "zram")


def unweighed_disks(files: HostFiles, cgroup_mode: str | None) -> list[str] | None:
    """When no disk of the machine (`sys/block`) is under a policy that weighs (BFQ, CFQ,
    or io.cost on v2), each disk with its scheduler ("vda (mq-deadline)"): a cgroup's own
    weight counts on none of them. None when one is, or when none is known."""
    out = []
    for name in files.listdir("sys/block"):
        dev = (files.read(f"sys/block/{name}/dev") or "").strip()
        if name.startswith(_VIRTUAL) or not dev:
            continue
        if weight_unsupported(files, cgroup_mode, dev) is None:
            if files.read(f"sys/block/{name}/queue/scheduler") is not None:
                return None  # this one weighs
            continue  # no scheduler file: nothing known
        text = files.read(f"sys/block/{name}/queue/scheduler") or ""
        out.append(f"{name} ({next((w.strip('[]') for w in text.split() if w.startswith('[')), '?')})")
    return out or None


def _device_weight(dev: str, want: int | None, held: Mapping[str, str | None]) -> list[_Step]:
    """The writes that give `dev` the weight `want` (None: none) in the weight files whose
    current value for it is `held`: a weight one file holds already is in force (the other
    refuses a device not under its policy), a stale value elsewhere is cleared."""
    value = str(want) if want is not None else None
    if value is not None and value not in held.values():
        return [tuple((f, f"{dev} {value}") for f in held)]
    return [((f, f"{dev} {CLEAR_DEVICE_WEIGHT[f]}"),) for f, v in held.items() if v is not None and v != value]


def _cgroup_weight(text: str | None) -> int | None:
    """The cgroup's own weight: "100" (v1's legacy files) or the "default 100" line."""
    words = (text or "").split("\n")[0].split()
    return int(words[-1]) if words and words[-1].isdigit() else None


def _reason(e: OSError) -> str:
    """"EOPNOTSUPP (Operation not supported)": the errno's name, which the kernel's docs use."""
    if e.errno is None:
        return str(e)
    name = "EOPNOTSUPP" if e.errno == errno.EOPNOTSUPP else errno.errorcode.get(e.errno, str(e.errno))
    return f"{name} ({os.strerror(e.errno)})"


def _device_lines(text: str | None) -> list[tuple[str, str]]:
    """("MAJ:MIN", rest) of each line of a per-device file that names a device."""
    out = []
    for line in (text or "").splitlines():
        dev, _, rest = line.strip().partition(" ")
        if ":" in dev and rest:
            out.append((dev, rest.strip()))
    return out
