"""Balloon types from the policy's configuration section, checked key by key.

    policy:
      Active: balloons
      balloons:
        PinMemory: true                 # default for every type
        PreferSpreadOnPhysicalCores: false   # default for every type
        AllocatorTopologyBalancing: false    # default for every type
        ReservedPoolNamespaces: [kube-system, "monitoring-*"]
        BalloonTypes:
          - Name: dataplane
            Namespaces: [dpdk]
            MatchExpressions: [{key: app, operator: In, values: [upf]}]
            MinCPUs: 2
            MaxCPUs: 8
            MinBalloons: 1
            MaxBalloons: 2
            HideHyperthreads: true
            AllocatorPriority: performance
          - Name: batch
            ShareIdleCPUsInSame: l3cache

Two types always exist: `reserved` (the reserved CPUs; the reserved namespaces
and kube-system) and `default` (whatever matches nothing). A BalloonTypes entry
with one of those names configures the built-in type. Every error is a
ConfigValueError whose message starts with the full key, e.g.
`policy.balloons.BalloonTypes[1].MinCPUs: ...`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Literal

from cri_resmgr.bounded import clip, short
from cri_resmgr.policy.api import Workload
from cri_resmgr.policy.balloons.tuning import TUNING_POLICY_OPTIONS, TUNING_TYPE_OPTIONS, BalloonTuning, parse_tuning
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import CpuClassDef, class_option, parse_classes, pick
from cri_resmgr.policy.expression import Expression, ExpressionError, parse_list
from cri_resmgr.policy.irqs import NOTHING, Selection
from cri_resmgr.policy.pools import option_bool
from cri_resmgr.policy.schedclass import NO_RULES, Rules
from cri_resmgr.topology.model import Level

__all__ = [
    "BalloonType", "BalloonsConfig", "parse_config", "canonical_keys", "RESERVED", "DEFAULT", "SECTION",
    "SHARE_LEVELS", "Priority", "POLICY_OPTIONS", "TYPE_OPTIONS", "check_node",
]

SECTION = "policy.balloons"
RESERVED = "reserved"
DEFAULT = "default"

Priority = Literal["performance", "efficiency", "none"]
_PRIORITIES: dict[str, Priority] = {
    "performance": "performance", "high": "performance",
    "efficiency": "efficiency", "efficient": "efficiency", "low": "efficiency",
    "none": "none", "normal": "none", "": "none",
}

# ShareIdleCPUsInSame value -> the topology level whose groups bound the sharing
# (None: the whole machine).
SHARE_LEVELS: dict[str, Level | None] = {
    "system": None, "package": "package", "die": "die", "numa": "node",
    "l3cache": "l3", "core": "core",
}

POLICY_OPTIONS = ("BalloonTypes", "PinMemory", "ReservedPoolNamespaces", "PreferSpreadOnPhysicalCores",
                  "AllocatorTopologyBalancing", "CPUClasses", "IdleCPUClass", *TUNING_POLICY_OPTIONS)
TYPE_OPTIONS = (
    "Name", "Namespaces", "MatchExpressions", "MinCPUs", "MaxCPUs", "MinBalloons", "MaxBalloons",
    "AllocatorPriority", "PreferSpreadingPods", "PreferNewBalloons", "PreferPerNamespaceBalloon",
    "ShareIdleCPUsInSame", "HideHyperthreads", "PinMemory", "CPUClass", "PreferSpreadOnPhysicalCores",
    "AllocatorTopologyBalancing", *TUNING_TYPE_OPTIONS,
)
# nri-plugins' numeric AllocatorPriority: 0 High, 1 Normal, 2 Low, 3 None.
_NUMERIC_PRIORITIES: dict[int, Priority] = {0: "performance", 1: "none", 2: "efficiency", 3: "none"}
# The reserved balloon is the reserved CPUs, exactly one of it: nothing sizes it.
_RESERVED_FIXED = ("MinCPUs", "MaxCPUs", "MinBalloons", "MaxBalloons", "HideHyperthreads",
                   "AllocatorPriority", "PreferNewBalloons", "PreferSpreadingPods",
                   "PreferPerNamespaceBalloon", "PreferSpreadOnPhysicalCores", "AllocatorTopologyBalancing")


@dataclass(frozen=True)
class BalloonType:
    name: str
    namespaces: tuple[str, ...] = ()  # shell globs
    match: tuple[Expression, ...] = ()  # all must hold
    min_cpus: int = 0
    max_cpus: int | None = None  # None: no limit
    min_balloons: int = 0
    max_balloons: int | None = None  # None: no limit
    priority: Priority = "none"
    spread_pods: bool = False  # containers of one pod in different balloons
    prefer_new: bool = False  # a new balloon before an existing one with room
    per_namespace: bool = False  # a balloon holds containers of one namespace
    share_idle: str | None = None  # a SHARE_LEVELS key
    hide_hyperthreads: bool = False
    spread_cores: bool = False  # PreferSpreadOnPhysicalCores: one thread of each core first
    balance: bool = False  # AllocatorTopologyBalancing: new balloons where most CPUs are free
    pin_memory: bool = True
    cpu_class: str = ""
    # SchedulingClass, IRQClaim, IRQMode (policy/balloons/tuning.py)
    tuning: BalloonTuning = field(default_factory=BalloonTuning, compare=False)
    order: int = 0  # position in BalloonTypes: matching tries types in this order
    configured: bool = field(default=False, compare=False)

    def matches(self, w: Workload) -> bool:
        """The type's Namespaces or MatchExpressions select the container."""
        if any(fnmatchcase(w.namespace, glob) for glob in self.namespaces):
            return True
        return bool(self.match) and all(e.evaluate(w) for e in self.match)

    def clamp(self, n: int) -> int:
        """`n` CPUs brought within [MinCPUs, MaxCPUs]."""
        n = max(n, self.min_cpus)
        return n if self.max_cpus is None else min(n, self.max_cpus)

    def can_add_balloon(self, count: int) -> bool:
        return self.max_balloons is None or count < self.max_balloons


@dataclass(frozen=True)
class BalloonsConfig:
    types: tuple[BalloonType, ...]  # matching order; reserved and default included
    reserved_namespaces: tuple[str, ...]
    # CPUClasses (policy/cpuclasses.py) and the class of the CPUs in no balloon. A type's
    # CPUClass names one of them; without CPUClasses it is kept and does nothing, as before.
    cpu_classes: Mapping[str, CpuClassDef] = field(default_factory=dict)
    idle_cpu_class: str | None = None
    sched: Rules = NO_RULES  # SchedulingClasses
    irqs: Selection = NOTHING  # ControllableInterrupts

    def type(self, name: str) -> BalloonType | None:
        for t in self.types:
            if t.name == name:
                return t
        return None

    @property
    def reserved(self) -> BalloonType:
        t = self.type(RESERVED)
        assert t is not None
        return t

    @property
    def default(self) -> BalloonType:
        t = self.type(DEFAULT)
        assert t is not None
        return t


def parse_config(options: Mapping[str, Any], section: str = SECTION) -> BalloonsConfig:
    """The policy's option section as a BalloonsConfig; raises ConfigValueError naming the key."""
    options = canonical_keys(options, POLICY_OPTIONS, section, "option")
    pin = option_bool(options, "PinMemory", section.removeprefix("policy."), default=True)
    defaults = {key: option_bool(options, key, section.removeprefix("policy."))
                for key in ("PreferSpreadOnPhysicalCores", "AllocatorTopologyBalancing")}
    reserved_ns = _globs(options.get("ReservedPoolNamespaces", ["kube-system"]),
                         f"{section}.ReservedPoolNamespaces")
    raw = options.get("BalloonTypes", [])
    if raw is None:
        raw = []
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ConfigValueError(f"{section}.BalloonTypes: expected a list of balloon types, got {short(raw)}")
    parsed: dict[str, BalloonType] = {}
    for i, entry in enumerate(raw):
        where = f"{section}.BalloonTypes[{i}]"
        if isinstance(entry, Mapping):
            entry = canonical_keys(entry, TYPE_OPTIONS, where, "balloon type option")
            if entry.get("Name") == DEFAULT:
                entry = {"MinBalloons": 1, "MaxBalloons": 1, **entry}  # one default balloon unless told
        t = parse_type(entry, where, pin, i, defaults)
        if t.name in parsed:
            raise ConfigValueError(f"{where}.Name: balloon type {short(t.name)} is defined twice")
        parsed[t.name] = t
    count = len(parsed)
    reserved = parsed.pop(RESERVED, None) or BalloonType(RESERVED, pin_memory=pin)
    reserved = _fixed_reserved(reserved)
    default = parsed.pop(DEFAULT, None) or BalloonType(
        DEFAULT, pin_memory=pin, min_balloons=1, max_balloons=1,
        spread_cores=defaults["PreferSpreadOnPhysicalCores"], balance=defaults["AllocatorTopologyBalancing"])
    default = _sane_default(default)
    user = sorted(parsed.values(), key=lambda t: t.order)
    types = (reserved, *user, _reordered(default, count))
    name = section.removeprefix("policy.")
    classes = parse_classes(options, name)
    idle = class_option(options, "IdleCPUClass", name, classes)
    if classes:
        for t in types:
            if t.cpu_class:
                where = f"{section}.BalloonTypes[{'Name=' + t.name if t.name in (RESERVED, DEFAULT) else t.order}]"
                pick(t.cpu_class, f"{where}.CPUClass", classes)
    sched, irqs = parse_tuning(options, types, section)
    return BalloonsConfig(types=types, reserved_namespaces=reserved_ns, cpu_classes=classes, idle_cpu_class=idle,
                          sched=sched, irqs=irqs)


def canonical_keys(entry: Mapping[str, Any], known: Sequence[str], where: str, what: str) -> dict[str, Any]:
    """`entry` with its keys spelt as `known` spells them: the references read their
    configuration case-insensitively (`ShareIdleCpusInSame`, `CPUClass`, camelCase in
    nri-plugins), so a key differing only in case is the same key; anything else is an
    error naming it."""
    by_lower = {k.lower(): k for k in known}
    out: dict[str, Any] = {}
    for key, value in entry.items():
        name = by_lower.get(str(key).lower())
        if name is None:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {near[0]}?" if near else f"known: {clip(', '.join(known), 120)}"
            raise ConfigValueError(f"{where}.{clip(str(key), 30)}: unknown {what} ({hint})")
        if name in out:
            raise ConfigValueError(f"{where}.{clip(str(key), 30)}: given twice (as {name} too)")
        out[name] = value
    return out


def parse_type(entry: Any, where: str, pin_default: bool = True, order: int = 0,
               defaults: Mapping[str, bool] | None = None) -> BalloonType:
    if not isinstance(entry, Mapping):
        raise ConfigValueError(f"{where}: expected a mapping with Name, Namespaces, MinCPUs..., got {short(entry)}")
    entry = canonical_keys(entry, TYPE_OPTIONS, where, "balloon type option")
    defaults = defaults or {}
    name = entry.get("Name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigValueError(f"{where}.Name: missing (every balloon type needs a name)")
    if any(ch in name for ch in "[]/ ") or name != name.strip():
        raise ConfigValueError(f"{where}.Name: {short(name)} may not contain spaces, '/', '[' or ']'")
    if name == RESERVED:
        fixed = [k for k in _RESERVED_FIXED if k in entry]
        if fixed:
            raise ConfigValueError(f"{where}.{fixed[0]}: the reserved balloon is the reserved CPUs "
                                   "(policy.ReservedResources); it cannot be sized or multiplied")
    try:
        match = parse_list(entry.get("MatchExpressions"), f"{where}.MatchExpressions")
    except ExpressionError as e:
        raise ConfigValueError(str(e)) from None
    min_cpus = _count(entry, "MinCPUs", where, 0)
    max_cpus = _count(entry, "MaxCPUs", where, None)
    if max_cpus is not None and max_cpus < max(min_cpus, 1):
        raise ConfigValueError(f"{where}.MaxCPUs: {max_cpus} is below MinCPUs ({min_cpus}) or 1")
    min_balloons = _count(entry, "MinBalloons", where, 0)
    max_balloons = _count(entry, "MaxBalloons", where, None)
    if max_balloons is not None and (max_balloons < min_balloons or max_balloons == 0):
        raise ConfigValueError(f"{where}.MaxBalloons: {max_balloons} is below MinBalloons ({min_balloons}) or 1")
    priority_raw = entry.get("AllocatorPriority", "none")
    if isinstance(priority_raw, int) and not isinstance(priority_raw, bool):
        priority = _NUMERIC_PRIORITIES.get(priority_raw)
    else:
        priority = _PRIORITIES.get(str(priority_raw).strip().lower()) if isinstance(priority_raw, str) else None
    if priority is None:
        raise ConfigValueError(f"{where}.AllocatorPriority: {short(priority_raw)} is not one of "
                               "performance (high, 0), efficiency (low, 2), none (normal, 1, 3)")
    share = entry.get("ShareIdleCPUsInSame")
    if share is not None:
        if not isinstance(share, str) or share.strip().lower() not in SHARE_LEVELS:
            raise ConfigValueError(f"{where}.ShareIdleCPUsInSame: {short(share)} is not one of "
                                   f"{', '.join(SHARE_LEVELS)}")
        share = share.strip().lower()
    cpu_class = entry.get("CPUClass", "")  # CpuClass too (canonical_keys): CRI Resource Manager's spelling
    if not isinstance(cpu_class, str):
        raise ConfigValueError(f"{where}.CPUClass: expected a class name, got {short(cpu_class)}")
    cpu_class = cpu_class.strip()
    section = where.removeprefix("policy.")
    return BalloonType(
        name=name,
        namespaces=_globs(entry.get("Namespaces", []), f"{where}.Namespaces"),
        match=match,
        min_cpus=min_cpus, max_cpus=max_cpus, min_balloons=min_balloons, max_balloons=max_balloons,
        priority=priority,
        spread_pods=option_bool(entry, "PreferSpreadingPods", section),
        prefer_new=option_bool(entry, "PreferNewBalloons", section),
        per_namespace=option_bool(entry, "PreferPerNamespaceBalloon", section),
        share_idle=share,
        hide_hyperthreads=option_bool(entry, "HideHyperthreads", section),
        spread_cores=option_bool(entry, "PreferSpreadOnPhysicalCores", section,
                                 default=defaults.get("PreferSpreadOnPhysicalCores", False)),
        balance=option_bool(entry, "AllocatorTopologyBalancing", section,
                            default=defaults.get("AllocatorTopologyBalancing", False)),
        pin_memory=option_bool(entry, "PinMemory", section, default=pin_default),
        cpu_class=cpu_class, order=order, configured=True, tuning=BalloonTuning.of(entry, where),
    )


def check_node(config: BalloonsConfig, assignable: int, online: int, threads: int = 1) -> None:
    """Every count and size of every type within what this node holds: MinCPUs within
    the CPUs balloons are made of (whole cores with HideHyperthreads), and MinBalloons
    at most one balloon per such CPU (a million empty balloons is no configuration,
    and would take the relay minutes to build). ConfigValueError names the key and
    the node's numbers."""
    node = f"this node has {online} CPUs online, {assignable} of them available to balloons"
    for t in config.types:
        if t.name == RESERVED or not t.configured:
            continue
        where = f"{SECTION}.BalloonTypes[{t.order if t.name != DEFAULT else 'Name=default'}]"
        per_cpu = threads if t.hide_hyperthreads else 1
        if t.min_cpus * per_cpu > assignable:
            hidden = f" ({t.min_cpus * per_cpu} with HideHyperthreads)" if per_cpu > 1 else ""
            raise ConfigValueError(f"{where}.MinCPUs: {t.min_cpus} CPUs{hidden} per balloon cannot be "
                                   f"given: {node}")
        if t.min_balloons > assignable:
            raise ConfigValueError(f"{where}.MinBalloons: {t.min_balloons} balloons cannot be made: {node}")


def _fixed_reserved(t: BalloonType) -> BalloonType:
    return replace(t, min_balloons=1, max_balloons=1, order=-1)


def _sane_default(t: BalloonType) -> BalloonType:
    """The default balloon always exists: unmatched containers, and those no balloon of
    their type can take, must have somewhere to run."""
    return replace(t, min_balloons=max(t.min_balloons, 1))


def _reordered(t: BalloonType, last: int) -> BalloonType:
    return replace(t, order=last)


def _count(entry: Mapping[str, Any], key: str, where: str, default: int | None) -> Any:
    value = entry.get(key)
    if value is None:  # absent, or `MinCPUs:` with no value: the default
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigValueError(f"{where}.{key}: expected a non-negative whole number, got {short(value)}")
    if key in ("MaxCPUs", "MaxBalloons") and value == 0:
        return None  # 0 means no limit, as in the original policy
    return value


def _globs(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) and v for v in value):
        raise ConfigValueError(f"{key}: expected a list of namespace names or globs, got {short(value)}")
    return tuple(value)
