"""Writes a block I/O class's rules into a container's own blkio cgroup (not the pod's:
on cgroup v1 a rule on the parent does not throttle a child's direct writes), and clears
what a class change removed. v1: `blkio.throttle.*_device`, `blkio.bfq.weight_device` or
`blkio.weight_device`, `blkio.bfq.weight` or `blkio.weight`; v2: `io.max`, `io.weight`
(`io.bfq.weight` where present)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.config.classes import BlockioRule

KEYS = ("rbps", "wbps", "riops", "wiops")
V1_THROTTLE = {"rbps": "blkio.throttle.read_bps_device", "wbps": "blkio.throttle.write_bps_device",
               "riops": "blkio.throttle.read_iops_device", "wiops": "blkio.throttle.write_iops_device"}
V1_DEVICE_WEIGHT = ("blkio.bfq.weight_device", "blkio.weight_device")
V1_WEIGHT = ("blkio.bfq.weight", "blkio.weight")
V2_WEIGHT = ("io.bfq.weight", "io.weight")
DEFAULT_WEIGHT = {"blkio.bfq.weight": 100, "blkio.weight": 500, "io.bfq.weight": 100, "io.weight": 100}


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


class BlkioWriter:
    """`note` hears every line written, for the dump."""

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

    def current(self, cgroup_dir: str) -> Limits:
        """What the cgroup's files hold now (a weight at its default counts as none)."""
        devices: dict[str, dict[str, int]] = {}
        if self.mode == "v1":
            for key, name in V1_THROTTLE.items():
                for dev, value in _device_lines(self._files.read(f"{cgroup_dir}/{name}")):
                    if value.isdigit():
                        devices.setdefault(dev, {})[key] = int(value)
            dev_weight = self._first(cgroup_dir, V1_DEVICE_WEIGHT)
            for dev, value in _device_lines(self._files.read(f"{cgroup_dir}/{dev_weight}")):
                if value.isdigit():
                    devices.setdefault(dev, {})["weight"] = int(value)
            weight_file = self._first(cgroup_dir, V1_WEIGHT)
        else:
            for dev, value in _device_lines(self._files.read(f"{cgroup_dir}/io.max")):
                for item in value.split():
                    k, _, v = item.partition("=")
                    if k in KEYS and v.isdigit():
                        devices.setdefault(dev, {})[k] = int(v)
            weight_file = self._first(cgroup_dir, V2_WEIGHT)
            for dev, value in _device_lines(self._files.read(f"{cgroup_dir}/{weight_file}")):
                if value.isdigit():
                    devices.setdefault(dev, {})["weight"] = int(value)
        words = (self._files.read(f"{cgroup_dir}/{weight_file}") or "").split("\n")[0].split()
        weight = int(words[-1]) if words and words[-1].isdigit() else None
        if weight == DEFAULT_WEIGHT[weight_file]:
            weight = None
        return Limits(devices={d: v for d, v in devices.items() if v}, weight=weight)

    def write(self, cgroup_dir: str, new: Limits, who: str = "") -> list[str]:
        """Makes the cgroup hold `new`, clearing the rules it holds that `new` has not;
        returns the lines written ("FILE: TEXT"). Raises OSError (the first write that failed)."""
        old = self.current(cgroup_dir)
        if self.mode == "v1":
            lines = self._v1(new, old, self._first(cgroup_dir, V1_DEVICE_WEIGHT), self._first(cgroup_dir, V1_WEIGHT))
        else:
            lines = self._v2(new, old, self._first(cgroup_dir, V2_WEIGHT))
        done = []
        for name, text in lines:
            self._files.write(f"{cgroup_dir}/{name}", text)
            done.append(f"{name}: {text}")
            if self._note is not None:
                self._note(f"blockio {who}: wrote {text!r} to {self._files.show(f'{cgroup_dir}/{name}')}")
        return done

    def _first(self, cgroup_dir: str, names: tuple[str, ...]) -> str:
        """The first of `names` the cgroup has (the BFQ file where the kernel has it)."""
        return next((n for n in names if self._files.exists(f"{cgroup_dir}/{n}")), names[-1])

    @staticmethod
    def _v1(new: Limits, old: Limits, dev_weight: str, weight: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for dev in sorted(set(new.devices) | set(old.devices)):
            want, had = new.devices.get(dev, {}), old.devices.get(dev, {})
            for key in (*KEYS, "weight"):
                if key in want and want[key] != had.get(key):
                    value = want[key]
                elif key in had and key not in want:
                    value = 0  # removes the rule
                else:
                    continue
                out.append((V1_THROTTLE.get(key, dev_weight), f"{dev} {value}"))
        if new.weight != old.weight:
            out.append((weight, str(new.weight if new.weight is not None else DEFAULT_WEIGHT[weight])))
        return out

    @staticmethod
    def _v2(new: Limits, old: Limits, weight: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for dev in sorted(set(new.devices) | set(old.devices)):
            want, had = new.devices.get(dev, {}), old.devices.get(dev, {})
            if any(want.get(k) != had.get(k) for k in KEYS):
                out.append(("io.max", f"{dev} " + " ".join(f"{k}={want.get(k, 'max')}" for k in KEYS)))
            if want.get("weight") != had.get("weight"):
                out.append((weight, f"{dev} {want.get('weight', 'default')}"))
        if new.weight != old.weight:
            out.append((weight, f"default {new.weight if new.weight is not None else DEFAULT_WEIGHT[weight]}"))
        return out


def _device_lines(text: str | None) -> list[tuple[str, str]]:
    """("MAJ:MIN", rest) of each line of a per-device file that names a device."""
    out = []
    for line in (text or "").splitlines():
        dev, _, rest = line.strip().partition(" ")
        if ":" in dev and rest:
            out.append((dev, rest.strip()))
    return out
