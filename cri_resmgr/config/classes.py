"""The `blockio` and `rdt` modules of the configuration: block I/O and RDT classes.

The shapes are CRI Resource Manager's (goresctrl's), with its key names:

    blockio:
      Classes:
        slowwriter:                       # a class: a list of device rules
          - Devices: [/dev/vda, /dev/sd*] # globs, resolved to major:minor when applied
            ThrottleWriteBps: 1M          # ThrottleReadBps, Throttle{Read,Write}IOPS, Weight
      QosClasses: {BestEffort: slowwriter}
    rdt:
      Options: {L3: {Optional: true}, MB: {Optional: true}}
      Partitions:
        shared:
          L3Allocation: "100%"            # of the cache: "N%", "A-B%" or a bit mask "0xff"
          MBAllocation: ["100%"]
          Classes:
            besteffort: {L3Allocation: "30%", MBAllocation: ["25%"]}   # of the partition
      QosClasses: {BestEffort: besteffort}

Only the syntax is checked here, with errors naming the key; whether the hardware
has what a configuration asks for (cache bits, CLOSes) is checked when it is
applied (`classes/rdtplan.py`), before anything in force changes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cri_resmgr.errors import CriResmgrError
from cri_resmgr.policy.quantity import parse_bytes

QOS_NAMES = ("Guaranteed", "Burstable", "BestEffort")
MAX_CACHE_ID = 4095  # resctrl domain ids are small (one per cache instance)
WEIGHT_RANGE = (10, 1000)  # blkio.bfq.weight / io.weight accept 1..1000; CFQ took 10..1000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PCT = re.compile(r"(\d{1,3})%")
_PCT_RANGE = re.compile(r"(\d{1,3})-(\d{1,3})%")
_MASK = re.compile(r"0x([0-9a-fA-F]{1,16})")
_MBPS = re.compile(r"(\d{1,9})MBps")
_IDS = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")


class ClassConfigError(CriResmgrError, ValueError):
    """A bad blockio or rdt module; the text names the key (without the source)."""


@dataclass(frozen=True)
class BlockioRule:
    """One rule of a class: limits on the devices its globs name (none: Weight only,
    the cgroup's own weight)."""

    devices: tuple[str, ...] = ()
    throttle_read_bps: int | None = None
    throttle_write_bps: int | None = None
    throttle_read_iops: int | None = None
    throttle_write_iops: int | None = None
    weight: int | None = None


@dataclass(frozen=True)
class BlockioConfig:
    classes: Mapping[str, tuple[BlockioRule, ...]] = field(default_factory=dict)
    qos_classes: Mapping[str, str] = field(default_factory=dict)  # QoS class name -> class

    def to_document(self) -> dict[str, Any]:
        classes = {name: [_rule_doc(r) for r in rules] for name, rules in self.classes.items()}
        return {"Classes": classes, "QosClasses": dict(self.qos_classes)}


@dataclass(frozen=True)
class CacheAllocation:
    """An L3 allocation: a share of the bits of the mask it applies to (lo..hi percent)
    or a bit mask relative to its lowest bit."""

    text: str
    low_pct: int = 0
    high_pct: int = 0
    mask: int | None = None


@dataclass(frozen=True)
class L3Allocation:
    """Per cache id: `default` for every id, `by_id` for the ids named."""

    default: CacheAllocation | None
    by_id: Mapping[int, CacheAllocation] = field(default_factory=dict)

    def for_id(self, cache_id: int) -> CacheAllocation | None:
        return self.by_id.get(cache_id, self.default)

    def to_document(self) -> Any:
        if not self.by_id and self.default is not None:
            return self.default.text
        doc = {str(i): a.text for i, a in sorted(self.by_id.items())}
        if self.default is not None:
            doc = {"all": self.default.text, **doc}
        return doc


@dataclass(frozen=True)
class MBAllocation:
    percent: int | None = None  # of the partition's (of the whole, for a partition)
    mbps: int | None = None  # used when resctrl is mounted with mba_MBps
    texts: tuple[str, ...] = ()


@dataclass(frozen=True)
class RdtClass:
    name: str
    partition: str
    l3: L3Allocation | None = None  # None: the partition's whole mask
    mb: MBAllocation | None = None  # None: the partition's whole bandwidth


@dataclass(frozen=True)
class RdtPartition:
    name: str
    l3: L3Allocation | None
    mb: MBAllocation | None
    classes: tuple[RdtClass, ...]


@dataclass(frozen=True)
class RdtConfig:
    l3_optional: bool = False
    mb_optional: bool = False
    partitions: tuple[RdtPartition, ...] = ()
    qos_classes: Mapping[str, str] = field(default_factory=dict)

    @property
    def classes(self) -> dict[str, RdtClass]:
        return {c.name: c for p in self.partitions for c in p.classes}

    def to_document(self) -> dict[str, Any]:
        parts: dict[str, Any] = {}
        for p in self.partitions:
            doc: dict[str, Any] = {}
            if p.l3 is not None:
                doc["L3Allocation"] = p.l3.to_document()
            if p.mb is not None:
                doc["MBAllocation"] = list(p.mb.texts)
            doc["Classes"] = {c.name: _class_doc(c) for c in p.classes}
            parts[p.name] = doc
        return {"Options": {"L3": {"Optional": self.l3_optional}, "MB": {"Optional": self.mb_optional}},
                "Partitions": parts, "QosClasses": dict(self.qos_classes)}


# -- block I/O ---------------------------------------------------------------------------

_RULE_KEYS = ("Devices", "ThrottleReadBps", "ThrottleWriteBps", "ThrottleReadIOPS", "ThrottleWriteIOPS", "Weight")


def parse_blockio(d: Mapping[str, Any]) -> BlockioConfig:
    _keys(d, ("Classes", "QosClasses"), "blockio.")
    raw = _mapping(d.get("Classes"), "blockio.Classes")
    classes: dict[str, tuple[BlockioRule, ...]] = {}
    for name, rules in raw.items():
        where = f"blockio.Classes.{_short(str(name))}"
        _name(name, where)
        if isinstance(rules, dict):  # one rule, written without the list
            rules = [rules]
        if not isinstance(rules, list):
            raise ClassConfigError(f"{where}: expected a list of device rules, got {_kind(rules)}")
        classes[str(name)] = tuple(_rule(r, f"{where}[{i}]") for i, r in enumerate(rules))
    return BlockioConfig(classes=classes, qos_classes=_qos(d.get("QosClasses"), "blockio", classes))


def _rule(r: Any, where: str) -> BlockioRule:
    if not isinstance(r, dict):
        raise ClassConfigError(f"{where}: expected a mapping of {', '.join(_RULE_KEYS)}, got {_kind(r)}")
    _keys(r, _RULE_KEYS, where + ".")
    devices = r.get("Devices", [])
    if isinstance(devices, str):
        devices = [devices]
    if not isinstance(devices, list) or not all(isinstance(x, str) and x.startswith("/") for x in devices):
        raise ClassConfigError(f"{where}.Devices: expected a list of device paths or globs (/dev/sd*)")
    values: dict[str, int | None] = {}
    for key in _RULE_KEYS[1:5]:
        value = r.get(key)
        if value is None:
            values[key] = None
            continue
        try:
            n = parse_bytes(value)
        except ValueError as e:
            raise ClassConfigError(f"{where}.{key}: {_short(str(e))}") from None
        if n <= 0:
            raise ClassConfigError(f"{where}.{key}: expected a positive quantity (1M, 512Ki), got {_show(value)}")
        values[key] = n
    weight = r.get("Weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int)
                               or not WEIGHT_RANGE[0] <= weight <= WEIGHT_RANGE[1]):
        raise ClassConfigError(f"{where}.Weight: expected a number from {WEIGHT_RANGE[0]} to "
                               f"{WEIGHT_RANGE[1]}, got {_show(weight)}")
    if not devices and any(v is not None for v in values.values()):
        raise ClassConfigError(f"{where}: throttling needs Devices (which disks to throttle)")
    if weight is None and not any(v is not None for v in values.values()):
        raise ClassConfigError(f"{where}: a rule sets nothing (give a Throttle* limit or a Weight)")
    return BlockioRule(devices=tuple(devices), throttle_read_bps=values["ThrottleReadBps"],
                       throttle_write_bps=values["ThrottleWriteBps"], throttle_read_iops=values["ThrottleReadIOPS"],
                       throttle_write_iops=values["ThrottleWriteIOPS"], weight=weight)


def _rule_doc(r: BlockioRule) -> dict[str, Any]:
    doc: dict[str, Any] = {"Devices": list(r.devices)} if r.devices else {}
    for key, value in (("ThrottleReadBps", r.throttle_read_bps), ("ThrottleWriteBps", r.throttle_write_bps),
                       ("ThrottleReadIOPS", r.throttle_read_iops), ("ThrottleWriteIOPS", r.throttle_write_iops),
                       ("Weight", r.weight)):
        if value is not None:
            doc[key] = value
    return doc


# -- RDT ---------------------------------------------------------------------------------


def parse_rdt(d: Mapping[str, Any]) -> RdtConfig:
    _keys(d, ("Options", "Partitions", "QosClasses"), "rdt.")
    options = _mapping(d.get("Options"), "rdt.Options")
    _keys(options, ("L3", "MB"), "rdt.Options.")
    optional = {}
    for kind in ("L3", "MB"):
        o = _mapping(options.get(kind), f"rdt.Options.{kind}")
        _keys(o, ("Optional",), f"rdt.Options.{kind}.")
        value = o.get("Optional", False)
        if not isinstance(value, bool):
            raise ClassConfigError(f"rdt.Options.{kind}.Optional: expected true or false, got {_show(value)}")
        optional[kind] = value
    partitions = []
    seen: dict[str, str] = {}
    for pname, p in _mapping(d.get("Partitions"), "rdt.Partitions").items():
        where = f"rdt.Partitions.{_short(str(pname))}"
        _name(pname, where)
        p = _mapping(p, where)
        _keys(p, ("L3Allocation", "MBAllocation", "Classes"), where + ".")
        classes = []
        for cname, c in _mapping(p.get("Classes"), where + ".Classes").items():
            cwhere = f"{where}.Classes.{_short(str(cname))}"
            _name(cname, cwhere)
            if cname in seen:
                raise ClassConfigError(f"{cwhere}: class {cname} is also in partition {seen[cname]} "
                                       "(class names are one namespace)")
            seen[cname] = pname
            c = _mapping(c, cwhere)
            _keys(c, ("L3Allocation", "MBAllocation"), cwhere + ".")
            classes.append(RdtClass(name=cname, partition=pname,
                                    l3=_l3(c.get("L3Allocation"), cwhere + ".L3Allocation"),
                                    mb=_mb(c.get("MBAllocation"), cwhere + ".MBAllocation")))
        partitions.append(RdtPartition(name=pname, l3=_l3(p.get("L3Allocation"), where + ".L3Allocation"),
                                       mb=_mb(p.get("MBAllocation"), where + ".MBAllocation"),
                                       classes=tuple(classes)))
    with_l3 = [p.name for p in partitions if p.l3 is not None]
    if with_l3 and len(with_l3) != len(partitions):
        missing = sorted(p.name for p in partitions if p.l3 is None)
        raise ClassConfigError(f"rdt.Partitions.{missing[0]}.L3Allocation: missing (every partition needs "
                               "one when any has one: partitions share the cache)")
    known = {c.name for p in partitions for c in p.classes}
    return RdtConfig(l3_optional=optional["L3"], mb_optional=optional["MB"], partitions=tuple(partitions),
                     qos_classes=_qos(d.get("QosClasses"), "rdt", known))


def _l3(value: Any, where: str) -> L3Allocation | None:
    if value is None:
        return None
    if isinstance(value, str):
        return L3Allocation(default=_cache_allocation(value, where))
    if not isinstance(value, dict):
        raise ClassConfigError(f'{where}: expected "N%", "A-B%", a bit mask "0x..." or a mapping of '
                               "cache ids (all, 0, 1-3) to one, got {_kind(value)}")
    default = None
    by_id: dict[int, CacheAllocation] = {}
    for key, text in value.items():
        k = _short(str(key))
        if not isinstance(text, str):
            raise ClassConfigError(f"{where}.{k}: expected a string, got {_kind(text)}")
        a = _cache_allocation(text, f"{where}.{k}")
        if k == "all":
            default = a
            continue
        if not _IDS.fullmatch(k):
            raise ClassConfigError(f"{where}.{k}: expected all or cache ids (0, 1-3, 0,2)")
        for part in k.split(","):
            lo, _, hi = part.partition("-")
            if int(hi or lo) > MAX_CACHE_ID or int(hi or lo) < int(lo):
                raise ClassConfigError(f"{where}.{k}: cache ids are 0 to {MAX_CACHE_ID}, ranges low-high")
            for i in range(int(lo), int(hi or lo) + 1):
                by_id[i] = a
    return L3Allocation(default=default, by_id=by_id)


def _cache_allocation(text: str, where: str) -> CacheAllocation:
    t = text.strip()
    if m := _PCT.fullmatch(t):
        pct = int(m.group(1))
        if not 0 < pct <= 100:
            raise ClassConfigError(f"{where}: {_show(text)}: a percentage from 1% to 100%")
        return CacheAllocation(text=t, low_pct=0, high_pct=pct)
    if m := _PCT_RANGE.fullmatch(t):
        lo, hi = int(m.group(1)), int(m.group(2))
        if not 0 <= lo < hi <= 100:
            raise ClassConfigError(f"{where}: {_show(text)}: a range A-B% with 0 <= A < B <= 100")
        return CacheAllocation(text=t, low_pct=lo, high_pct=hi)
    if m := _MASK.fullmatch(t):
        mask = int(m.group(1), 16)
        if mask == 0 or not _contiguous(mask):
            raise ClassConfigError(f"{where}: {_show(text)}: a cache bit mask is one block of ones (0xf0, not 0x101)")
        return CacheAllocation(text=t, mask=mask)
    raise ClassConfigError(f'{where}: {_show(text)}: expected "N%", "A-B%" or a bit mask "0x..."')


def _mb(value: Any, where: str) -> MBAllocation | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
        raise ClassConfigError(f'{where}: expected a list like ["50%"] or ["50%", "2000MBps"]')
    pct = mbps = None
    for x in items:
        t = x.strip()
        if m := _PCT.fullmatch(t):
            pct = int(m.group(1))
            if not 0 < pct <= 100:
                raise ClassConfigError(f"{where}: {_show(x)}: a percentage from 1% to 100%")
        elif m := _MBPS.fullmatch(t):
            mbps = int(m.group(1))
        else:
            raise ClassConfigError(f'{where}: {_show(x)}: expected "N%" or "NMBps"')
    return MBAllocation(percent=pct, mbps=mbps, texts=tuple(items))


def _class_doc(c: RdtClass) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if c.l3 is not None:
        doc["L3Allocation"] = c.l3.to_document()
    if c.mb is not None:
        doc["MBAllocation"] = list(c.mb.texts)
    return doc


# -- shared ------------------------------------------------------------------------------


def _qos(value: Any, module: str, known: Mapping[str, Any] | set[str]) -> dict[str, str]:
    where = f"{module}.QosClasses"
    q = _mapping(value, where)
    _keys(q, QOS_NAMES, where + ".")
    out = {}
    for qos, cls in q.items():
        if not isinstance(cls, str) or cls not in known:
            raise ClassConfigError(f"{where}.{qos}: unknown class {_show(cls)} (classes: "
                                   f"{', '.join(sorted(known)) or 'none'})")
        out[str(qos)] = cls
    return out


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClassConfigError(f"{where}: expected a mapping, got {_kind(value)}")
    return value


def _keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for k in data:
        if k not in allowed:
            near = difflib.get_close_matches(str(k), allowed, n=1) if len(str(k)) <= 100 else []
            guess = f"did you mean {near[0]}? " if near else ""
            raise ClassConfigError(f"{where}{_short(str(k))}: unknown key ({guess}known: {', '.join(allowed)})")


def _name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ClassConfigError(f"{where}: a name is 1-64 letters, digits, '_', '.', '-' (not starting with "
                               "one of the last three)")


def _short(text: str, most: int = 64) -> str:
    """User text in an error, bounded: a megabyte of key is not echoed."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"


def _show(value: Any) -> str:
    return _short(repr(value))


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _contiguous(mask: int) -> bool:
    low = mask & -mask
    return (mask + low) & mask == 0
