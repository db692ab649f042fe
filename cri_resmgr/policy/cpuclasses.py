"""CPU classes as a policy's configuration gives them: the classes (`CPUClasses`, a list
of nri-plugins' `CPUClass`) and which class each kind of CPU gets (the layout a policy
hands the engine, `CpuClassLayout`). Parsing only, no I/O: whether this machine can give
a class is checked against its sysfs where the classes are enforced (classes/cpuplan.py).

    policy:
      topology-aware:
        CPUClasses:
          - Name: turbo
            MinFreq: 3000000            # kHz, written to cpufreq/scaling_min_freq
            MaxFreq: 3600000            # kHz, scaling_max_freq
            FreqGovernor: performance   # scaling_governor
            EnergyPerformancePreference: performance
            UncoreMinFreq: 2000000      # kHz, the die's intel_uncore_frequency
            UncoreMaxFreq: 2400000
            DisabledCstates: [C6, C1E]  # cpuidle/stateN/name -> stateN/disable
          - Name: eco
            MaxFreq: 1800000
        DefaultExclusiveCPUClass: turbo
        SharedPoolCPUClass: eco

A field left out (or 0, "", as nri-plugins reads them) is not written: the CPU keeps
what it has for it. Errors name the key: `policy.topology-aware.CPUClasses[1].MaxFreq:
1200000 is below MinFreq 2000000`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cri_resmgr.bounded import clip, short
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["CpuClassDef", "CpuClassLayout", "CLASS_KEYS", "LAYOUT_KEYS", "ANNOTATION", "parse_classes",
           "class_option", "pick", "parse_layout", "CpuClassed"]

# The keys of one class, nri-plugins' names in our configuration's (capitalized) style.
CLASS_KEYS = ("Name", "MinFreq", "MaxFreq", "FreqGovernor", "EnergyPerformancePreference", "UncoreMinFreq",
              "UncoreMaxFreq", "DisabledCstates")
# The policy options naming classes (balloons has IdleCPUClass and each type's CPUClass instead).
LAYOUT_KEYS = ("CPUClasses", "DefaultExclusiveCPUClass", "SharedPoolCPUClass", "ReservedPoolCPUClass")
# A container's class for its exclusive CPUs: cpuclass.cri-resource-manager.intel.com/container.NAME
# (and /pod, and nri-plugins' cpuclass.resource-policy.nri.io/...), looked up by annotation_keys.
ANNOTATION = "cpuclass.cri-resource-manager.intel.com"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MAX_KHZ = 100_000_000  # 100 GHz: anything above is a unit mistake (Hz for kHz)


@dataclass(frozen=True)
class CpuClassDef:
    """One class; 0 and "" (and an empty list) mean: not set, leave the CPU's own value.
    `where` is its key in the configuration, for error messages."""

    name: str
    where: str
    min_freq: int = 0  # kHz
    max_freq: int = 0
    governor: str = ""
    epp: str = ""  # a name of energy_performance_available_preferences, or 0-255
    uncore_min_freq: int = 0  # kHz
    uncore_max_freq: int = 0
    disabled_cstates: tuple[str, ...] = ()

    @property
    def sets_cpufreq(self) -> bool:
        return bool(self.min_freq or self.max_freq or self.governor or self.epp)

    @property
    def sets_uncore(self) -> bool:
        return bool(self.uncore_min_freq or self.uncore_max_freq)


@dataclass(frozen=True)
class CpuClassLayout:
    """Which class each CPU of a policy gets, in this order (classes/cpuplan.py):
    a container's exclusive CPUs (`exclusive`: the default, or the container's
    annotation when `annotations`), then the pool it is in (`pools` by pool name, `kinds`
    by pool kind: a balloon type), then `rest` for the policy's other CPUs (`cpus`: the
    shared pool of static and topology-aware, balloons' idle CPUs). None: no class."""

    classes: Mapping[str, CpuClassDef] = field(default_factory=dict)
    exclusive: str | None = None
    annotations: bool = True
    pools: Mapping[str, str] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)
    rest: str | None = None
    cpus: CPUSet = CPUSet()
    # Exclusive CPUs take the class of their pool (a dedicated balloon's are its balloon's).
    exclusive_in_pool: bool = False

    @property
    def empty(self) -> bool:
        return not self.classes


def parse_classes(options: Mapping[str, object], section: str) -> dict[str, CpuClassDef]:
    """The section's `CPUClasses` (a list of classes, or a mapping of name to class as
    CRI Resource Manager's `cpu` module had them), by name."""
    raw = options.get("CPUClasses")
    key = f"policy.{section}.CPUClasses"
    if raw is None:
        return {}
    items: list[tuple[str, object, str | None]]
    if isinstance(raw, Mapping):
        items = [(f"{key}.{clip(str(n), 64)}", v, str(n)) for n, v in raw.items()]
    elif isinstance(raw, list):
        items = [(f"{key}[{i}]", v, None) for i, v in enumerate(raw)]
    else:
        raise ConfigValueError(f"{key}: expected a list of classes ({{Name: ..., MaxFreq: ...}}), got {short(raw)}")
    out: dict[str, CpuClassDef] = {}
    for where, entry, name in items:
        c = _parse_class(entry, where, name)
        if c.name in out:
            raise ConfigValueError(f"{where}.Name: class {short(c.name)} is defined twice")
        out[c.name] = c
    return out


def _parse_class(entry: object, where: str, name: str | None) -> CpuClassDef:
    if not isinstance(entry, Mapping):
        raise ConfigValueError(f"{where}: expected a class ({{Name: ..., MinFreq: ..., MaxFreq: ...}}), "
                               f"got {short(entry)}")
    # Keys case-insensitively, as balloons reads its own: nri-plugins writes minFreq, name.
    by_lower = {k.lower(): k for k in CLASS_KEYS}
    canonical: dict[str, object] = {}
    for k, v in entry.items():
        known = by_lower.get(str(k).lower())
        if known is None:
            raise ConfigValueError(f"{where}.{clip(str(k), 30)}: unknown key (known: {', '.join(CLASS_KEYS)})")
        if known in canonical:
            raise ConfigValueError(f"{where}.{clip(str(k), 30)}: given twice (as {known} too)")
        canonical[known] = v
    entry = canonical
    given = entry.get("Name", name)
    if name is not None and given != name:
        raise ConfigValueError(f"{where}.Name: {short(given)} differs from the class's key {short(name)}")
    if not isinstance(given, str) or not _NAME.match(given):
        raise ConfigValueError(f"{where}.Name: expected a class name (letters, digits, '_', '.', '-'), "
                               f"got {short(given)}")
    c = CpuClassDef(
        name=given, where=where,
        min_freq=_khz(entry, "MinFreq", where), max_freq=_khz(entry, "MaxFreq", where),
        governor=_word(entry, "FreqGovernor", where), epp=_epp(entry, where),
        uncore_min_freq=_khz(entry, "UncoreMinFreq", where), uncore_max_freq=_khz(entry, "UncoreMaxFreq", where),
        disabled_cstates=_cstates(entry, where))
    if c.min_freq and c.max_freq and c.max_freq < c.min_freq:
        raise ConfigValueError(f"{where}.MaxFreq: {c.max_freq} is below MinFreq {c.min_freq}")
    if c.uncore_min_freq and c.uncore_max_freq and c.uncore_max_freq < c.uncore_min_freq:
        raise ConfigValueError(f"{where}.UncoreMaxFreq: {c.uncore_max_freq} is below UncoreMinFreq "
                               f"{c.uncore_min_freq}")
    return c


def _khz(entry: Mapping[str, object], key: str, where: str) -> int:
    value = entry.get(key, 0)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > _MAX_KHZ:
        raise ConfigValueError(f"{where}.{key}: expected a frequency in kHz (0 to {_MAX_KHZ}), got {short(value)}")
    return value


def _word(entry: Mapping[str, object], key: str, where: str) -> str:
    value = entry.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str) or (value and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value.strip())):
        raise ConfigValueError(f"{where}.{key}: expected a name, got {short(value)}")
    return value.strip()


def _epp(entry: Mapping[str, object], where: str) -> str:
    """A preference's name (performance, balance_performance...) or a raw value 0-255."""
    value = entry.get("EnergyPerformancePreference", "")
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 255:
            raise ConfigValueError(f"{where}.EnergyPerformancePreference: {value} is outside 0-255")
        # nri-plugins' uint: 0 is "not set" there, so it is here too.
        return str(value) if value else ""
    return _word(entry, "EnergyPerformancePreference", where)


def _cstates(entry: Mapping[str, object], where: str) -> tuple[str, ...]:
    value = entry.get("DisabledCstates", ())
    if value is None:
        return ()
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple):
        raise ConfigValueError(f"{where}.DisabledCstates: expected a list of C-state names, got {short(value)}")
    out = []
    for v in value:
        if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z0-9_+.-][A-Za-z0-9_+. -]{0,31}", v.strip()):
            raise ConfigValueError(f"{where}.DisabledCstates: expected C-state names (C6, C1E), got {short(v)}")
        out.append(v.strip())
    return tuple(out)


def class_option(options: Mapping[str, object], key: str, section: str,
                 classes: Mapping[str, CpuClassDef]) -> str | None:
    """An option naming one of the section's classes (None: not given)."""
    value = options.get(key)
    if value is None or value == "":
        return None
    return pick(value, f"policy.{section}.{key}", classes)


def pick(value: object, where: str, classes: Mapping[str, CpuClassDef]) -> str | None:
    """`value` as the name of a class of `classes`; "" is none."""
    if not isinstance(value, str):
        raise ConfigValueError(f"{where}: expected a CPU class name, got {short(value)}")
    name = value.strip()
    if not name:
        return None
    if name not in classes:
        raise ConfigValueError(f"{where}: no CPU class {short(name)} in CPUClasses "
                               f"(classes: {', '.join(sorted(classes)) or 'none'})")
    return name


def parse_layout(options: Mapping[str, object], section: str, reserved_pool: str = "reserved") -> CpuClassLayout:
    """`CPUClasses` and the classes of static's, static-plus' and topology-aware's CPUs:
    `DefaultExclusiveCPUClass` (a container's exclusive CPUs, unless its annotation names
    another), `SharedPoolCPUClass` (the shared CPUs), `ReservedPoolCPUClass`. The policy
    adds its CPUs (`cpus`) when it is built."""
    classes = parse_classes(options, section)
    reserved = class_option(options, "ReservedPoolCPUClass", section, classes)
    return CpuClassLayout(
        classes=classes, exclusive=class_option(options, "DefaultExclusiveCPUClass", section, classes),
        pools={reserved_pool: reserved} if reserved else {},
        rest=class_option(options, "SharedPoolCPUClass", section, classes))


@runtime_checkable
class CpuClassed(Protocol):
    """A policy whose CPUs may have CPU classes (static, static-plus, topology-aware, balloons)."""

    def cpu_classes(self) -> CpuClassLayout:
        """The configuration's classes and which CPUs get which (the engine reads the
        pools and who holds which CPUs from `usage()`)."""
