"""CPU classes, decided without I/O: which class each CPU has now (`assign`, from the
policy's allocation state and its layout, policy/cpuclasses.py), what each sysfs file is
to hold for that (`wanted`), and whether this machine can give a configuration's classes
at all (`check`, against what `classes/cpufreq.py` read of it).

A CPU's class, in this order: held exclusively by a container, the container's class
(its annotation when the layout takes annotations, else the policy's default for
exclusive CPUs); in a pool with a class (the reserved pool, a balloon of a type with a
CPUClass), that class; one of the policy's other CPUs (`layout.cpus`), the layout's
`rest` (the shared pool, balloons' idle CPUs); else none. A CPU with no class, or a
field its class leaves out, keeps (or gets back) what it had before any class was
written (classes/cpufreq.py remembers it).

The uncore is per die: of the classes of the die's CPUs, the highest UncoreMinFreq and
the highest UncoreMaxFreq (nri-plugins' "performance preference").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cri_resmgr.config.classes import ClassConfigError
from cri_resmgr.policy.cpuclasses import CpuClassDef, CpuClassLayout
from cri_resmgr.policy.usage import PolicyUsage
from cri_resmgr.topology.cpuset import CPUSet

CPU_DIR = "sys/devices/system/cpu"
UNCORE_DIR = f"{CPU_DIR}/intel_uncore_frequency"


def cpufreq_file(cpu: int, name: str) -> str:
    return f"{CPU_DIR}/cpu{cpu}/cpufreq/{name}"


def cstate_file(cpu: int, index: int) -> str:
    return f"{CPU_DIR}/cpu{cpu}/cpuidle/state{index}/disable"


def uncore_dir(package: int, die: int) -> str:
    return f"{UNCORE_DIR}/package_{package:02d}_die_{die:02d}"


@dataclass(frozen=True)
class CpuFreq:
    """One CPU's cpufreq as the kernel offers it."""

    min_khz: int  # cpuinfo_min_freq
    max_khz: int  # cpuinfo_max_freq
    governors: tuple[str, ...]  # scaling_available_governors
    epp: tuple[str, ...] | None = None  # energy_performance_available_preferences; None: no EPP file


@dataclass(frozen=True)
class Uncore:
    min_khz: int  # initial_min_freq_khz (the hardware's limits as the driver found them)
    max_khz: int


@dataclass(frozen=True)
class CpuHost:
    """What this machine offers for CPU classes: the CPUs with cpufreq, each CPU's idle
    states by name (-> stateN), the uncore dies, and each CPU's (package, die)."""

    cpufreq: Mapping[int, CpuFreq] = field(default_factory=dict)
    cstates: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    uncore: Mapping[tuple[int, int], Uncore] = field(default_factory=dict)
    die_of: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    where: str = "/"  # the host root, for messages


def check(classes: Iterable[CpuClassDef], host: CpuHost) -> list[str]:
    """Refuses (ClassConfigError naming the key) a class this machine's kernel would
    refuse: a frequency outside cpuinfo_{min,max}_freq (of all CPUs: a class may land on
    any), a governor or an EPP it does not list, a C-state it does not have, an uncore
    frequency outside the driver's range. What the machine lacks entirely (no cpufreq,
    no cpuidle, no uncore driver) is not refused: the lines returned say which classes
    cannot take effect here: one line, for one warning."""
    classes = list(classes)
    freq = host.cpufreq
    missing: list[tuple[str, list[str]]] = []  # what this machine lacks, and the classes that need it
    for what, needs in ((f"cpufreq ({host.where}/{CPU_DIR}/cpu*/cpufreq)", [c.name for c in classes if c.sets_cpufreq]
                         if not freq else []),
                        ("energy_performance_preference", [c.name for c in classes if c.epp]
                         if freq and all(f.epp is None for f in freq.values()) else []),
                        (f"cpuidle states ({host.where}/{CPU_DIR}/cpu*/cpuidle)",
                         [c.name for c in classes if c.disabled_cstates] if not host.cstates else []),
                        (f"intel_uncore_frequency ({host.where}/{UNCORE_DIR})",
                         [c.name for c in classes if c.sets_uncore] if not host.uncore else [])):
        if needs:
            missing.append((what, needs))
    notes = []
    if missing:
        notes.append("CPU classes cannot take effect on this machine, which has no " + "; no ".join(
            f"{what} (needed by {', '.join(needs)})" for what, needs in missing) +
            ": they are chosen and shown, nothing is written for them")
    if freq:
        lo = min(f.min_khz for f in freq.values())
        hi = max(f.max_khz for f in freq.values())
        governors = set.intersection(*(set(f.governors) for f in freq.values()))
        with_epp = [f.epp for f in freq.values() if f.epp is not None]
        epps = set.intersection(*(set(e) for e in with_epp)) if with_epp else set()
    cstates = set().union(*(set(s) for s in host.cstates.values())) if host.cstates else set()
    for c in classes:
        if freq:
            for key, value in (("MinFreq", c.min_freq), ("MaxFreq", c.max_freq)):
                if value and value < lo:
                    raise ClassConfigError(f"{c.where}.{key}: {value} is below cpuinfo_min_freq {lo} "
                                           "(the lowest of this machine's CPUs)")
                if value and value > hi:
                    raise ClassConfigError(f"{c.where}.{key}: {value} is above cpuinfo_max_freq {hi} "
                                           "(the highest of this machine's CPUs)")
            if c.governor and c.governor not in governors:
                raise ClassConfigError(f"{c.where}.FreqGovernor: {c.governor} is not available here "
                                       f"(scaling_available_governors: {' '.join(sorted(governors)) or 'none'})")
            if c.epp and with_epp:
                if not c.epp.isdigit() and c.epp not in epps:
                    raise ClassConfigError(f"{c.where}.EnergyPerformancePreference: {c.epp} is not available here "
                                           "(energy_performance_available_preferences: "
                                           f"{' '.join(sorted(epps)) or 'none'}; or a number 0-255)")
        if cstates:
            for name in c.disabled_cstates:
                if name not in cstates:
                    raise ClassConfigError(f"{c.where}.DisabledCstates: no C-state {name} here "
                                           f"(cpuidle/state*/name: {', '.join(sorted(cstates))})")
        if host.uncore:
            ulo = min(u.min_khz for u in host.uncore.values())
            uhi = max(u.max_khz for u in host.uncore.values())
            for key, value in (("UncoreMinFreq", c.uncore_min_freq), ("UncoreMaxFreq", c.uncore_max_freq)):
                if value and not ulo <= value <= uhi:
                    raise ClassConfigError(f"{c.where}.{key}: {value} is outside the uncore's {ulo}-{uhi} "
                                           "(intel_uncore_frequency/*/initial_{min,max}_freq_khz)")
    return notes


def assign(layout: CpuClassLayout, usage: PolicyUsage, chosen: Mapping[str, str | None]) -> dict[int, str]:
    """Each CPU's class (CPUs without one are left out). `chosen`: the class a
    container's annotation gives its exclusive CPUs, by container key (None: the
    annotation names no class of the configuration: none); a key not in it takes the
    layout's default."""
    out: dict[int, str] = {}
    if layout.empty:
        return out
    for cpu in layout.cpus:
        if layout.rest is not None:
            out[cpu] = layout.rest
    for p in usage.pools:
        cls = layout.pools.get(p.name) if p.name in layout.pools else layout.kinds.get(p.kind) if p.kind else None
        if cls is not None:
            for cpu in p.cpus:
                out[cpu] = cls
    if layout.exclusive_in_pool:
        return out
    for key, cpus in usage.exclusive.items():
        cls = chosen[key] if key in chosen and layout.annotations else layout.exclusive
        for cpu in cpus:
            if cls is None:
                out.pop(cpu, None)
            else:
                out[cpu] = cls
    return out


def wanted(assignment: Mapping[int, str], classes: Mapping[str, CpuClassDef], host: CpuHost) -> dict[str, str]:
    """The value each file is to hold for `assignment`, by path under the host root. A
    file not in it is to hold what it had before any class (or is left alone). Only
    what this machine has: a CPU without cpufreq gets no cpufreq file."""
    out: dict[str, str] = {}
    uses_cstates = any(c.disabled_cstates for c in classes.values())
    for cpu, name in assignment.items():
        c = classes.get(name)
        if c is None:
            continue
        f = host.cpufreq.get(cpu)
        if f is not None:
            for file, value in (("scaling_min_freq", c.min_freq), ("scaling_max_freq", c.max_freq)):
                if value:
                    out[cpufreq_file(cpu, file)] = str(value)
            if c.governor:
                out[cpufreq_file(cpu, "scaling_governor")] = c.governor
            if c.epp and f.epp is not None:
                out[cpufreq_file(cpu, "energy_performance_preference")] = c.epp
        states = host.cstates.get(cpu)
        if uses_cstates and states:
            # As nri-plugins: once a class disables C-states, each class's CPUs have the
            # others enabled, so a CPU that changes class gets back what it lost.
            for state, index in states.items():
                out[cstate_file(cpu, index)] = "1" if state in c.disabled_cstates else "0"
    dies: dict[tuple[int, int], tuple[int, int]] = {}  # die -> the highest uncore min and max of its CPUs' classes
    if host.uncore:
        for cpu, name in assignment.items():
            c = classes.get(name)
            where = host.die_of.get(cpu)
            if c is not None and where is not None and c.sets_uncore:
                lo, hi = dies.get(where, (0, 0))
                dies[where] = (max(lo, c.uncore_min_freq), max(hi, c.uncore_max_freq))
    for (package, die) in host.uncore:
        lo, hi = dies.get((package, die), (0, 0))
        if lo:
            out[f"{uncore_dir(package, die)}/min_freq_khz"] = str(lo)
        if hi:
            out[f"{uncore_dir(package, die)}/max_freq_khz"] = str(hi)
    return out


def changes(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str | None]:
    """What to write to go from `before` to `after`: new or changed values, and None for
    a file no longer wanted (it gets back what it had)."""
    out: dict[str, str | None] = {p: v for p, v in after.items() if before.get(p) != v}
    out.update({p: None for p in before if p not in after})
    return out


def by_class(assignment: Mapping[int, str]) -> dict[str, CPUSet]:
    """Each class's CPUs (for `cri-resmgr status` and the metrics)."""
    out: dict[str, set[int]] = {}
    for cpu, name in assignment.items():
        out.setdefault(name, set()).add(cpu)
    return {name: CPUSet(cpus) for name, cpus in sorted(out.items())}
