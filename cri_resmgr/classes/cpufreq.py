"""CPU classes on the host: reads what the kernel offers (cpufreq, cpuidle states, the
intel_uncore_frequency dies) and writes the files a plan changes (classes/cpuplan.py),
through `hostfs.HostFiles` only (-host-root, -dry-run).

The value a file held before our first write to it is remembered (the engine keeps it
across restarts, `originals`/`adopt`), and written back when no class wants the file any
more (a CPU that leaves a classed pool for one without a class, a configuration without
classes). At shutdown nothing is written back, as nri-plugins does: a restart keeps the
containers on their CPUs, and their CPUs' classes with them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from cri_resmgr.classes.cpuplan import CPU_DIR, UNCORE_DIR, CpuFreq, CpuHost, Uncore
from cri_resmgr.classes.hostfs import HostFiles

log = logging.getLogger(__name__)

# Pairs whose order matters: the kernel refuses a minimum above the maximum in force.
_PAIRS = (("cpufreq/scaling_min_freq", "cpufreq/scaling_max_freq"), ("/min_freq_khz", "/max_freq_khz"))
_FIRST_TO_LAST = ("cpufreq/scaling_governor", "cpufreq/scaling_min_freq", "cpufreq/scaling_max_freq",
                  "cpufreq/energy_performance_preference", "/min_freq_khz", "/max_freq_khz")


@dataclass(frozen=True)
class Failure:
    path: str  # under the host root
    value: str
    error: str


class CpuFreqWriter:
    """`note` hears every write, for the dump."""

    def __init__(self, files: HostFiles, note: Callable[[str], None] | None = None):
        self._files = files
        self._note = note
        self._original: dict[str, str] = {}  # path -> what it held before our first write
        self.count = 0  # files written (for metrics)

    def show(self, rel: str) -> str:
        return self._files.show(rel)

    def host(self, cpus: Iterable[int], die_of: Mapping[int, tuple[int, int]]) -> CpuHost:
        """What the kernel offers for `cpus` (the online ones)."""
        freq: dict[int, CpuFreq] = {}
        cstates: dict[int, dict[str, int]] = {}
        for cpu in cpus:
            base = f"{CPU_DIR}/cpu{cpu}"
            lo, hi = self._int(f"{base}/cpufreq/cpuinfo_min_freq"), self._int(f"{base}/cpufreq/cpuinfo_max_freq")
            if lo is not None and hi is not None:
                epp = self._files.read(f"{base}/cpufreq/energy_performance_available_preferences")
                has_epp = self._files.exists(f"{base}/cpufreq/energy_performance_preference")
                freq[cpu] = CpuFreq(min_khz=lo, max_khz=hi, governors=tuple(
                    (self._files.read(f"{base}/cpufreq/scaling_available_governors") or "").split()),
                    epp=tuple((epp or "").split()) if has_epp else None)
            states = {}
            for d in self._files.listdir(f"{base}/cpuidle"):
                if d.startswith("state") and d[5:].isdigit():
                    name = (self._files.read(f"{base}/cpuidle/{d}/name") or "").strip()
                    if name and self._files.exists(f"{base}/cpuidle/{d}/disable"):
                        states[name] = int(d[5:])
            if states:
                cstates[cpu] = states
        uncore = {}
        for d in self._files.listdir(UNCORE_DIR):
            parts = d.split("_")  # package_XX_die_YY
            if len(parts) == 4 and parts[0] == "package" and parts[2] == "die" and parts[1].isdigit() \
                    and parts[3].isdigit():
                lo = self._int(f"{UNCORE_DIR}/{d}/initial_min_freq_khz")
                hi = self._int(f"{UNCORE_DIR}/{d}/initial_max_freq_khz")
                if lo is not None and hi is not None:
                    uncore[(int(parts[1]), int(parts[3]))] = Uncore(lo, hi)
        return CpuHost(cpufreq=freq, cstates=cstates, uncore=uncore, die_of=dict(die_of),
                       where=self._files.show("/").rstrip("/"))

    def _int(self, rel: str) -> int | None:
        text = (self._files.read(rel) or "").strip()
        return int(text) if text.isdigit() else None

    def apply(self, changes: Mapping[str, str | None]) -> list[Failure]:
        """Writes `changes` (None: what the file held before our first write, if we
        wrote it); returns the writes the kernel refused. Of a min/max pair, the one that
        keeps min <= max at every step goes first."""
        failures = []
        values: dict[str, str] = {}
        for path, value in changes.items():
            if value is None:
                value = self._original.get(path)
                if value is None:
                    continue  # never written by us: left as it is
            values[path] = value
        for path in _ordered(values, self._files):
            value = values[path]
            restoring = changes[path] is None
            now = self._files.read(path)
            if now is None:
                failures.append(Failure(path, value, "no such file"))
                continue
            if not restoring and path not in self._original:
                self._original[path] = now.strip()
            if now.strip() == value:  # holds it already (a restart, a field two classes share): not written
                if restoring:
                    del self._original[path]
                continue
            try:
                self._files.write(path, value)
            except OSError as e:
                failures.append(Failure(path, value, e.strerror or str(e)))
                continue
            self.count += 1
            if restoring:
                del self._original[path]
            if self._note is not None:
                self._note(f"cpu class: wrote {value!r} to {self._files.show(path)}")
        return failures

    def holds(self) -> bool:
        """Whether any file is held (cheap: asked on every decision of a node without classes)."""
        return bool(self._original)

    def originals(self) -> dict[str, str]:
        """What each file we hold held before our first write (to keep across a restart)."""
        return dict(self._original)

    def adopt(self, originals: Mapping[str, str]) -> None:
        """What a previous run remembered: given back, not re-read, when no class wants the file."""
        for path, value in originals.items():
            self._original.setdefault(path, value)

    def written(self) -> list[str]:
        """The files written that hold a class's value now (what was there is remembered)."""
        return sorted(self._original)


def _ordered(values: Mapping[str, str], files: HostFiles) -> list[str]:
    """The paths in order, a pair's minimum before its maximum unless the new minimum is
    above the maximum in force (then the maximum goes first)."""
    out: list[str] = []
    for path in sorted(values, key=_pair_key):
        for lo_name, hi_name in _PAIRS:
            if path.endswith(hi_name):
                lo_path = path[: -len(hi_name)] + lo_name
                new_lo, current_hi = _number(values.get(lo_path)), _number(files.read(path))
                if lo_path in out and new_lo is not None and current_hi is not None and new_lo > current_hi:
                    out.insert(out.index(lo_path), path)
                    break
        else:
            out.append(path)
    return out


def _pair_key(path: str) -> tuple[str, int]:
    """A CPU's governor first (intel_pstate refuses an EPP other than performance under the
    performance governor), then its minimum, maximum and EPP; an uncore die's minimum
    just before its maximum."""
    for rank, name in enumerate(_FIRST_TO_LAST):
        if path.endswith(name):
            return path[: -len(name)], rank
    return path, len(_FIRST_TO_LAST)


def _number(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if t.isdigit() else None
