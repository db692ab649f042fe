"""Scheduling classes (nri-plugins' `SchedulingClass`): a named Linux scheduling policy,
priority, flags, nice value and I/O class for a container's processes, parsed from a
policy's section and chosen for a container without I/O.

    SchedulingClasses:
      - Name: realtime
        Policy: fifo          # none, other, fifo, rr, batch, idle, deadline
        Priority: 42          # fifo and rr: 1..99; the others: 0 or left out
        Nice: -5              # -20..19
        IOClass: rt           # none, rt, be, idle
        IOPriority: 0         # 0..7 (rt, be)
      - Name: dl
        Policy: deadline
        Runtime: 10000        # microseconds (nri-plugins' unit); Runtime <= Deadline <= Period
        Deadline: 100000
        Period: 100000
    NamespaceSchedulingClasses: {batch-*: lowprio}      # topology-aware, static, static-plus
    PodQoSSchedulingClasses: {BestEffort: lowprio}

A container's class: the annotation `scheduling-class.resource-policy.nri.io` (or our
domain's `scheduling-class.cri-resource-manager.intel.com`), `/container.NAME` before
`/pod` before the plain key; else the policy's own default (a balloon type's
SchedulingClass, a namespace's, the QoS class's); else none. Every error is a
ConfigValueError whose message starts with the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from cri_resmgr.bounded import clip, short
from cri_resmgr.policy.api import Workload
from cri_resmgr.policy.context import ConfigValueError

__all__ = ["SchedClass", "Rules", "Choice", "parse_classes", "parse_rules", "class_name", "RULE_OPTIONS",
           "ANNOTATION", "NO_RULES", "POLICIES", "IO_CLASSES", "FLAGS"]

ANNOTATION = "scheduling-class.cri-resource-manager.intel.com"  # annotation_keys adds nri-plugins' domain
POLICIES = ("none", "other", "fifo", "rr", "batch", "idle", "deadline")
IO_CLASSES = ("none", "rt", "be", "idle")
# The flags sched_setattr(2) takes without utilization values (util-clamp-* need them,
# and a class has none to give).
FLAGS = ("reset-on-fork", "reclaim", "dl-overrun", "keep-policy", "keep-params")
KEYS = ("Name", "Policy", "Priority", "Flags", "Nice", "Runtime", "Deadline", "Period", "IOClass", "IOPriority")
RULE_OPTIONS = ("SchedulingClasses", "NamespaceSchedulingClasses", "PodQoSSchedulingClasses")
QOS = ("Guaranteed", "Burstable", "BestEffort")


@dataclass(frozen=True)
class SchedClass:
    name: str
    policy: str = "none"  # POLICIES
    priority: int = 0
    flags: tuple[str, ...] = ()
    nice: int | None = None  # None: left as it is
    runtime_us: int = 0  # deadline only
    deadline_us: int = 0
    period_us: int = 0
    io_class: str = "none"  # IO_CLASSES; none: left as it is
    io_priority: int = 0

    def describe(self) -> str:
        """One line for logs and dry-run: "fifo priority 42, nice -5, I/O rt 0"."""
        parts = []
        if self.policy == "deadline":
            parts.append(f"deadline runtime {self.runtime_us}us deadline {self.deadline_us}us "
                         f"period {self.period_us or self.deadline_us}us")
        elif self.policy in ("fifo", "rr"):
            parts.append(f"{self.policy} priority {self.priority}")
        elif self.policy != "none":
            parts.append(self.policy)
        if self.flags:
            parts.append("flags " + ",".join(self.flags))
        if self.nice is not None:
            parts.append(f"nice {self.nice}")
        if self.io_class != "none":
            parts.append(f"I/O {self.io_class} {self.io_priority}" if self.io_class != "idle" else "I/O idle")
        return ", ".join(parts) or "nothing"


@dataclass(frozen=True)
class Choice:
    """A container's class: `cls` (None: none), where it came from, and the unknown
    class an annotation asked for (the container then gets none)."""

    cls: SchedClass | None = None
    source: str = "none"  # "annotation", "policy", "none"
    unknown: str | None = None


@dataclass(frozen=True)
class Rules:
    classes: Mapping[str, SchedClass]
    by_namespace: tuple[tuple[str, str], ...] = ()  # (glob, class), first match wins
    by_qos: Mapping[str, str] | None = None

    def choose(self, w: Workload, default: str = "") -> Choice:
        """`w`'s class: its annotation, else `default` (the policy's own: a balloon
        type's), else its namespace's, else its QoS class's, else none."""
        asked = w.effective_annotation(ANNOTATION)
        if asked is not None:
            name = asked.strip()
            if name in self.classes:
                return Choice(self.classes[name], "annotation")
            return Choice(None, "annotation", unknown=name)
        name = default or next((c for glob, c in self.by_namespace if fnmatchcase(w.namespace, glob)), "") or \
            (self.by_qos or {}).get(w.qos.value, "")
        return Choice(self.classes[name], "policy") if name in self.classes else Choice()


NO_RULES = Rules(classes={})


def parse_rules(options: Mapping[str, Any], section: str, with_defaults: bool = True) -> Rules:
    """SchedulingClasses (and, `with_defaults`, NamespaceSchedulingClasses and
    PodQoSSchedulingClasses) of a policy's section (`section`: "policy.topology-aware")."""
    classes = parse_classes(options.get("SchedulingClasses"), f"{section}.SchedulingClasses")
    if not with_defaults:
        return Rules(classes=classes)
    ns: list[tuple[str, str]] = []
    raw_ns = options.get("NamespaceSchedulingClasses") or {}
    if not isinstance(raw_ns, Mapping):
        raise ConfigValueError(f"{section}.NamespaceSchedulingClasses: expected namespace: class, got {short(raw_ns)}")
    for glob, name in raw_ns.items():
        ns.append((str(glob), class_name(name, classes, f"{section}.NamespaceSchedulingClasses.{clip(str(glob), 40)}")))
    raw_qos = options.get("PodQoSSchedulingClasses") or {}
    if not isinstance(raw_qos, Mapping):
        raise ConfigValueError(f"{section}.PodQoSSchedulingClasses: expected QoS class: class, got {short(raw_qos)}")
    qos = {}
    for q, name in raw_qos.items():
        key = f"{section}.PodQoSSchedulingClasses.{clip(str(q), 30)}"
        known = {k.lower(): k for k in QOS}.get(str(q).lower())
        if known is None:
            raise ConfigValueError(f"{key}: not a QoS class ({', '.join(QOS)})")
        qos[known] = class_name(name, classes, key)
    return Rules(classes=classes, by_namespace=tuple(ns), by_qos=qos)


def class_name(value: Any, classes: Mapping[str, SchedClass], key: str) -> str:
    """A reference to a scheduling class (a balloon type's SchedulingClass): it must exist."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise ConfigValueError(f"{key}: expected a scheduling class name, got {short(value)}")
    if value not in classes:
        raise ConfigValueError(f"{key}: scheduling class {short(value)} is not in SchedulingClasses "
                               f"({', '.join(classes) or 'none defined'})")
    return value


def parse_classes(raw: Any, where: str) -> dict[str, SchedClass]:
    if raw is None:
        return {}
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ConfigValueError(f"{where}: expected a list of scheduling classes, got {short(raw)}")
    out: dict[str, SchedClass] = {}
    for i, entry in enumerate(raw):
        c = _parse_class(entry, f"{where}[{i}]")
        if c.name in out:
            raise ConfigValueError(f"{where}[{i}].Name: scheduling class {short(c.name)} is defined twice")
        out[c.name] = c
    return out


def _keys(entry: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Keys as KEYS spells them (nri-plugins writes them camelCase: `ioClass`)."""
    by_lower = {k.lower(): k for k in KEYS}
    out: dict[str, Any] = {}
    for key, value in entry.items():
        name = by_lower.get(str(key).lower())
        if name is None:
            raise ConfigValueError(f"{where}.{clip(str(key), 30)}: unknown scheduling class key "
                                   f"(known: {', '.join(KEYS)})")
        if name in out:
            raise ConfigValueError(f"{where}.{clip(str(key), 30)}: given twice (as {name} too)")
        out[name] = value
    return out


def _int(entry: Mapping[str, Any], key: str, where: str, low: int, high: int) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigValueError(f"{where}.{key}: expected a whole number, got {short(value)}")
    if not low <= value <= high:
        raise ConfigValueError(f"{where}.{key}: {value} is not in {low}..{high}")
    return value


def _choice(entry: Mapping[str, Any], key: str, where: str, known: Sequence[str]) -> str:
    value = entry.get(key, "none")
    text = value.strip().lower() if isinstance(value, str) else None
    if text == "":
        text = "none"
    if text is None or text not in known:
        raise ConfigValueError(f"{where}.{key}: {short(value)} is not one of {', '.join(known)}")
    return text


def _parse_class(entry: Any, where: str) -> SchedClass:
    if not isinstance(entry, Mapping):
        raise ConfigValueError(f"{where}: expected a mapping with Name, Policy, Priority..., got {short(entry)}")
    entry = _keys(entry, where)
    name = entry.get("Name")
    if not isinstance(name, str) or not name.strip() or any(ch.isspace() for ch in name):
        raise ConfigValueError(f"{where}.Name: expected a name without spaces, got {short(name)}")
    policy = _choice(entry, "Policy", where, POLICIES)
    priority = _int(entry, "Priority", where, -(2**31), 2**31 - 1)
    if policy in ("fifo", "rr"):
        if priority is None:
            raise ConfigValueError(f"{where}.Priority: missing ({policy} needs a priority in 1..99)")
        if not 1 <= priority <= 99:
            raise ConfigValueError(f"{where}.Priority: {priority} is not in 1..99 for {policy}")
    elif priority not in (None, 0):
        raise ConfigValueError(f"{where}.Priority: {priority} is not 0: {policy} has no priority "
                               "(only fifo and rr take 1..99)")
    flags = entry.get("Flags") or []
    if isinstance(flags, str):
        flags = [flags]
    if not isinstance(flags, Sequence) or not all(isinstance(f, str) for f in flags):
        raise ConfigValueError(f"{where}.Flags: expected a list of flags, got {short(flags)}")
    flags = [f.strip().lower() for f in flags]
    for f in flags:
        if f not in FLAGS:
            raise ConfigValueError(f"{where}.Flags: {short(f)} is not one of {', '.join(FLAGS)}")
        if f in ("reclaim", "dl-overrun") and policy != "deadline":
            raise ConfigValueError(f"{where}.Flags: {f} is for the deadline policy, not {policy}")
    if flags and policy == "none":
        raise ConfigValueError(f"{where}.Flags: flags need a Policy (none leaves the policy as it is)")
    nice = _int(entry, "Nice", where, -20, 19)
    times = {k: _int(entry, k, where, 0, 2**53) for k in ("Runtime", "Deadline", "Period")}
    if policy == "deadline":
        runtime, deadline, period = times["Runtime"] or 0, times["Deadline"] or 0, times["Period"] or 0
        if runtime <= 0:
            raise ConfigValueError(f"{where}.Runtime: missing (deadline needs Runtime, Deadline and Period "
                                   "in microseconds)")
        if deadline < runtime:
            raise ConfigValueError(f"{where}.Deadline: {deadline} is below Runtime ({runtime})")
        if period and period < deadline:
            raise ConfigValueError(f"{where}.Period: {period} is below Deadline ({deadline})")
    else:
        given = next((k for k, v in times.items() if v is not None), None)
        if given is not None:
            raise ConfigValueError(f"{where}.{given}: only the deadline policy takes Runtime, Deadline and Period")
        runtime = deadline = period = 0
    io_class = _choice(entry, "IOClass", where, IO_CLASSES)
    io_priority = _int(entry, "IOPriority", where, 0, 7)
    if io_priority is not None and io_class not in ("rt", "be"):
        raise ConfigValueError(f"{where}.IOPriority: {io_priority} needs IOClass rt or be, not {io_class}")
    return SchedClass(name=name, policy=policy, priority=priority or 0, flags=tuple(flags), nice=nice,
                      runtime_us=runtime, deadline_us=deadline, period_us=period, io_class=io_class,
                      io_priority=io_priority or (4 if io_class in ("rt", "be") else 0))
