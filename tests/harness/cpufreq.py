"""cpufreq, cpuidle and intel_uncore_frequency files under a test's host root, built and
behaving like the kernel's, for machines without them (these VMs have no cpufreq).

`build` writes, beside a tree from `sysfs.generate`, each CPU's
`cpufreq/{cpuinfo_min_freq,cpuinfo_max_freq,scaling_min_freq,scaling_max_freq,
scaling_governor,scaling_available_governors,energy_performance_preference,
energy_performance_available_preferences}`, `cpuidle/stateN/{name,disable}` and the uncore
dies' `{initial_,}{min,max}_freq_khz`: the files exist before anyone writes, as the
kernel's do. `KernelLike` is the class controllers' `HostFiles` over that tree, doing
what a kernel does: a frequency outside cpuinfo_{min,max}_freq is clamped into it (as
cpufreq's verify does); refused (EINVAL) are a minimum above the maximum in force or a
maximum below the minimum (as kernels before freq QoS, 5.3, refused them: newer ones keep
the request and clamp, so an order that works on the old ones works on both), a governor
not in scaling_available_governors, an EPP not in the available list nor 0-255 (EBUSY for
one other than `performance` under the performance governor, as intel_pstate), a C-state
`disable` other than 0 or 1, an uncore frequency outside its initial range or crossing the
other limit. Every write that went in is recorded in `writes`.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from cri_resmgr.classes.hostfs import HostRoot

CPU_DIR = "sys/devices/system/cpu"
GOVERNORS = ("performance", "powersave", "schedutil")
EPPS = ("default", "performance", "balance_performance", "balance_power", "power")
CSTATES = ("POLL", "C1", "C1E", "C6")


def build(root: Path, cpus: Iterable[int], min_khz: int = 800000, max_khz: int = 3500000,
          governor: str = "powersave", governors: tuple[str, ...] = GOVERNORS, epps: tuple[str, ...] | None = EPPS,
          cstates: tuple[str, ...] = CSTATES, dies: Iterable[tuple[int, int]] = ((0, 0),),
          uncore: tuple[int, int] | None = (1200000, 2400000)) -> None:
    """`epps` None: a driver without EPP; `uncore` None: no uncore driver."""
    base = root / CPU_DIR
    for cpu in cpus:
        f = base / f"cpu{cpu}" / "cpufreq"
        f.mkdir(parents=True, exist_ok=True)
        for name, value in (("cpuinfo_min_freq", min_khz), ("cpuinfo_max_freq", max_khz),
                            ("scaling_min_freq", min_khz), ("scaling_max_freq", max_khz),
                            ("scaling_governor", governor), ("scaling_available_governors", " ".join(governors)),
                            ("scaling_driver", "intel_pstate")):
            (f / name).write_text(f"{value}\n")
        if epps is not None:
            (f / "energy_performance_preference").write_text("balance_performance\n")
            (f / "energy_performance_available_preferences").write_text(" ".join(epps) + " \n")
        for i, name in enumerate(cstates):
            d = base / f"cpu{cpu}" / "cpuidle" / f"state{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "name").write_text(f"{name}\n")
            (d / "disable").write_text("0\n")
    if uncore is not None:
        for package, die in dies:
            d = base / "intel_uncore_frequency" / f"package_{package:02d}_die_{die:02d}"
            d.mkdir(parents=True, exist_ok=True)
            for name, value in (("initial_min_freq_khz", uncore[0]), ("initial_max_freq_khz", uncore[1]),
                                ("min_freq_khz", uncore[0]), ("max_freq_khz", uncore[1])):
                (d / name).write_text(f"{value}\n")


WRITABLE = ("cpufreq/scaling_min_freq", "cpufreq/scaling_max_freq", "cpufreq/scaling_governor",
            "cpufreq/energy_performance_preference", "/disable", "/min_freq_khz", "/max_freq_khz")


def files_under(root: Path) -> dict[str, str]:
    """The content of every file a CPU class may write (cpufreq's scaling_*, EPP, cpuidle's
    disable, the uncore's limits), by path under `root`: to compare a tree before and after."""
    out = {}
    base = root / CPU_DIR
    patterns = ("cpu[0-9]*/cpufreq/*", "cpu[0-9]*/cpuidle/state*/disable", "intel_uncore_frequency/*/*")
    for pattern in patterns:
        for p in sorted(base.glob(pattern)):
            rel = str(p.relative_to(root))
            if rel.endswith(WRITABLE) and "initial_" not in rel:
                out[rel] = p.read_text()
    return out


class KernelLike(HostRoot):
    def __init__(self, root: str):
        super().__init__(root)
        self.writes: list[tuple[str, str]] = []
        # Paths the kernel refuses for reasons of its own (a driver busy, firmware locking
        # the P-states), by path under the root: the errno it gives.
        self.refuse: dict[str, int] = {}

    def _value(self, rel: str) -> str:
        return (self.read(rel) or "").strip()

    def write(self, rel: str, text: str) -> None:
        rel = rel.strip("/")
        value = text.strip()
        if rel in self.refuse:
            raise OSError(self.refuse[rel], os.strerror(self.refuse[rel]), self.show(rel))
        d, _, name = rel.rpartition("/")
        if "/cpufreq" in d:
            value = self._cpufreq(d, name, value)
        elif "/cpuidle/" in d and name == "disable":
            if value not in ("0", "1"):
                raise OSError(errno.EINVAL, "Invalid argument", self.show(rel))
        elif "intel_uncore_frequency/" in d:
            self._uncore(d, name, value)
        # A sysfs attribute takes the whole value; a plain file would keep a longer old tail.
        with open(self._path(rel), "r+", encoding="utf-8") as f:
            f.write(value + "\n")
            f.truncate()
        self.writes.append((rel, value))

    def _refuse(self, d: str, name: str, code: int = errno.EINVAL) -> None:
        raise OSError(code, "Invalid argument" if code == errno.EINVAL else "Device or resource busy",
                      self.show(f"{d}/{name}"))

    def _cpufreq(self, d: str, name: str, value: str) -> str:
        """The value the file holds after the write (a frequency clamped), or OSError."""
        if name in ("scaling_min_freq", "scaling_max_freq"):
            if not value.isdigit():
                self._refuse(d, name)
            lo, hi = int(self._value(f"{d}/cpuinfo_min_freq")), int(self._value(f"{d}/cpuinfo_max_freq"))
            v = min(max(int(value), lo), hi)
            value = str(v)
            if name == "scaling_min_freq" and v > int(self._value(f"{d}/scaling_max_freq")):
                self._refuse(d, name)
            if name == "scaling_max_freq" and v < int(self._value(f"{d}/scaling_min_freq")):
                self._refuse(d, name)
        elif name == "scaling_governor":
            if value not in self._value(f"{d}/scaling_available_governors").split():
                self._refuse(d, name)
        elif name == "energy_performance_preference":
            available = self._value(f"{d}/energy_performance_available_preferences").split()
            if value not in available and not (value.isdigit() and 0 <= int(value) <= 255):
                self._refuse(d, name)
            if self._value(f"{d}/scaling_governor") == "performance" and value != "performance":
                self._refuse(d, name, errno.EBUSY)
        else:  # cpuinfo_*, scaling_available_*: read-only in the kernel
            raise OSError(errno.EACCES, "Permission denied", self.show(f"{d}/{name}"))
        return value

    def _uncore(self, d: str, name: str, value: str) -> None:
        if name not in ("min_freq_khz", "max_freq_khz") or not value.isdigit():
            self._refuse(d, name)
        v = int(value)
        lo, hi = int(self._value(f"{d}/initial_min_freq_khz")), int(self._value(f"{d}/initial_max_freq_khz"))
        if not lo <= v <= hi:
            self._refuse(d, name)
        if name == "min_freq_khz" and v > int(self._value(f"{d}/max_freq_khz")):
            self._refuse(d, name)
        if name == "max_freq_khz" and v < int(self._value(f"{d}/min_freq_khz")):
            self._refuse(d, name)
