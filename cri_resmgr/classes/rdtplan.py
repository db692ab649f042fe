"""The resctrl groups an RDT configuration asks for on this hardware: each class's
whole schemata, from the configuration and what resctrl's `info/` tells (cbm_mask,
min_cbm_bits, num_closids, min_bandwidth, bandwidth_gran). No I/O.

As goresctrl does it: partitions share the cache, each its percentage of the bits laid
out one after the other in the configuration's order (or its own range or mask; they
must not overlap); a class's L3Allocation is a share of its partition's bits, its
MBAllocation a share of its partition's bandwidth. A configuration that needs more
CLOSes (one per class, the root group has one) or more cache bits than there are is
refused here, when it is given, not when a class is first used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cri_resmgr.config.classes import CacheAllocation, ClassConfigError, RdtConfig, RdtPartition

UNLIMITED_MBPS = 4294967295  # what resctrl shows for no limit under mba_MBps


@dataclass(frozen=True)
class CacheInfo:
    cbm_mask: int
    min_cbm_bits: int
    num_closids: int
    ids: tuple[int, ...]
    kinds: tuple[str, ...] = ("L3",)  # ("L3CODE", "L3DATA") with code/data prioritization


@dataclass(frozen=True)
class MbInfo:
    min_bandwidth: int
    bandwidth_gran: int
    num_closids: int
    ids: tuple[int, ...]
    mbps: bool = False  # mounted with mba_MBps: values are MB/s, not percent


@dataclass(frozen=True)
class ResctrlInfo:
    l3: CacheInfo | None
    mb: MbInfo | None
    other_groups: int = 0  # control groups of other tools: each holds a CLOS too


@dataclass(frozen=True)
class RdtPlan:
    schemata: Mapping[str, str]  # class -> its group's whole schemata
    notes: tuple[str, ...] = ()  # what was left out (an optional resource the machine lacks)


def plan(cfg: RdtConfig, info: ResctrlInfo) -> RdtPlan:
    """Raises ClassConfigError naming the key and what the hardware has."""
    classes = [c for p in cfg.partitions for c in p.classes]
    notes: list[str] = []
    use_l3 = any(p.l3 is not None for p in cfg.partitions)
    use_mb = any(p.mb is not None or any(c.mb is not None for c in p.classes) for p in cfg.partitions)
    if use_l3 and info.l3 is None:
        if not cfg.l3_optional:
            raise ClassConfigError("rdt: L3Allocation is given but this machine's resctrl has no L3 cache "
                                   "allocation (info/L3); set rdt.Options.L3.Optional: true to go without")
        notes.append("L3 cache allocation: not available here (optional): left out")
        use_l3 = False
    if use_mb and info.mb is None:
        if not cfg.mb_optional:
            raise ClassConfigError("rdt: MBAllocation is given but this machine's resctrl has no memory "
                                   "bandwidth allocation (info/MB); set rdt.Options.MB.Optional: true to go without")
        notes.append("memory bandwidth allocation: not available here (optional): left out")
        use_mb = False
    closids = [r.num_closids for r, used in ((info.l3, use_l3), (info.mb, use_mb)) if r is not None and used]
    if classes and closids and len(classes) > min(closids) - 1 - info.other_groups:
        others = f", {info.other_groups} of them held by other tools' groups" if info.other_groups else ""
        raise ClassConfigError(f"rdt: {len(classes)} classes need {len(classes)} CLOSes besides the root "
                               f"group's; the hardware has {min(closids)} in all (info/*/num_closids){others}")
    l3 = _l3_masks(cfg, info.l3) if use_l3 and info.l3 is not None else {}
    out: dict[str, str] = {}
    for p in cfg.partitions:
        for c in p.classes:
            lines = []
            if use_l3 and info.l3 is not None:
                masks = {i: _class_mask(c.l3.for_id(i) if c.l3 is not None else None, l3[p.name][i], info.l3,
                                        f"rdt.Partitions.{p.name}.Classes.{c.name}.L3Allocation", i)
                         for i in info.l3.ids}
                text = ";".join(f"{i}={masks[i]:x}" for i in info.l3.ids)
                lines += [f"{kind}:{text}" for kind in info.l3.kinds]
            if use_mb and info.mb is not None:
                value = _mb_value(p, c.mb.percent if c.mb else None, c.mb.mbps if c.mb else None, info.mb)
                lines.append("MB:" + ";".join(f"{i}={value}" for i in info.mb.ids))
            out[c.name] = "".join(line + "\n" for line in lines)
    return RdtPlan(schemata=out, notes=tuple(notes))


def _l3_masks(cfg: RdtConfig, info: CacheInfo) -> dict[str, dict[int, int]]:
    """Each partition's mask per cache id; over-subscription and overlaps refused."""
    nbits = info.cbm_mask.bit_length()
    full = (1 << nbits) - 1
    out: dict[str, dict[int, int]] = {p.name: {} for p in cfg.partitions}
    for i in info.ids:
        cum = 0
        taken: list[tuple[str, int]] = []
        for p in cfg.partitions:
            where = f"rdt.Partitions.{p.name}.L3Allocation"
            a = p.l3.for_id(i) if p.l3 is not None else None
            if a is None:
                raise ClassConfigError(f"{where}: nothing for cache id {i} (give all: or the id)")
            if a.mask is not None:
                mask = a.mask
                if mask & ~full:
                    raise ClassConfigError(f"{where}: {a.text} is outside the cache's mask {info.cbm_mask:#x} "
                                           f"(info/L3/cbm_mask)")
            elif a.low_pct == 0:
                lo, cum = cum, cum + a.high_pct
                if cum > 100:
                    raise ClassConfigError(f"{where}: the partitions ask for {cum}% of cache id {i}: "
                                           "over-subscribed (at most 100%)")
                mask = _bits(nbits * lo // 100, nbits * cum // 100 - 1)
            else:
                mask = _bits(nbits * a.low_pct // 100, -(-nbits * a.high_pct // 100) - 1)
            count = bin(mask).count("1")
            if count < info.min_cbm_bits:
                raise ClassConfigError(f"{where}: {a.text} is {count} bits of cache id {i}'s {nbits}, fewer than "
                                       f"the {info.min_cbm_bits} the hardware needs (info/L3/min_cbm_bits)")
            for other, m in taken:
                if m & mask:
                    raise ClassConfigError(f"{where}: overlaps partition {other} on cache id {i} "
                                           f"({mask:#x} and {m:#x}): over-subscribed")
            taken.append((p.name, mask))
            out[p.name][i] = mask
    return out


def _class_mask(a: CacheAllocation | None, part: int, info: CacheInfo, where: str, cache_id: int) -> int:
    if a is None:
        return part
    low = (part & -part).bit_length() - 1
    nb = part.bit_length() - low
    if a.mask is not None:
        mask = a.mask << low
        if mask & ~part:
            raise ClassConfigError(f"{where}: {a.text} does not fit its partition's {nb} bits "
                                   f"({part:#x}) on cache id {cache_id}")
        if bin(mask).count("1") < info.min_cbm_bits:
            raise ClassConfigError(f"{where}: {a.text} has fewer than the {info.min_cbm_bits} bits the "
                                   "hardware needs (info/L3/min_cbm_bits)")
        return mask
    lsb, msb = nb * a.low_pct // 100, -(-nb * a.high_pct // 100) - 1
    gap = info.min_cbm_bits - (msb - lsb + 1)
    if gap > 0:  # widened to the hardware's minimum, upwards first, as goresctrl does
        up = min(gap, nb - 1 - msb)
        msb, lsb = msb + up, lsb - (gap - up)
        if lsb < 0:
            raise ClassConfigError(f"{where}: its partition has {nb} bits of cache id {cache_id}, fewer than "
                                   f"the {info.min_cbm_bits} the hardware needs (info/L3/min_cbm_bits)")
    return _bits(lsb, msb) << low


def _mb_value(p: RdtPartition, pct: int | None, mbps: int | None, info: MbInfo) -> int:
    if info.mbps:
        limits = [v for v in (mbps, p.mb.mbps if p.mb else None) if v is not None]
        return min(limits) if limits else UNLIMITED_MBPS
    share = (p.mb.percent if p.mb and p.mb.percent is not None else 100) * (pct if pct is not None else 100)
    value = -(-share // 100)
    gran = max(info.bandwidth_gran, 1)
    value = -(-value // gran) * gran
    return min(max(value, info.min_bandwidth), 100)


def _bits(lsb: int, msb: int) -> int:
    return ((1 << (msb - lsb + 1)) - 1) << lsb if msb >= lsb else 0
