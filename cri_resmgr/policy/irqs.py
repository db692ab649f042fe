"""Which interrupts a policy may move, and where it wants them: plain data, no I/O.

    ControllableInterrupts: [24, "30-39", "virtio*-input*"]

An entry is an IRQ number, a range of them ("30-39"), or a shell glob matched against the
IRQ's description in /proc/interrupts (its chip and device, as nri-plugins matches them:
"PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0"). Only IRQs the list selects are ever
read or written; without the list (nri-plugins: every IRQ) none is.

A policy's `Intent` says, for the controllable IRQs, which CPUs none of them may land on
(`avoid`: an isolating balloon's CPUs, exclusive CPUs) and which IRQs go to which CPUs
(`sinks`: a balloon type's IRQClaim). `classes/irqplan.py` turns it into affinities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from cri_resmgr.bounded import short
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Selection", "Intent", "parse_selection", "IRQ_OPTIONS", "NOTHING", "NO_INTENT"]

IRQ_OPTIONS = ("ControllableInterrupts",)
MAX_IRQ = 1 << 20  # far above any kernel's nr_irqs


@dataclass(frozen=True)
class Selection:
    """IRQs by number ranges (inclusive) and description globs."""

    ranges: tuple[tuple[int, int], ...] = ()
    globs: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ranges or self.globs)

    def selects(self, irq: int, description: str) -> bool:
        return any(lo <= irq <= hi for lo, hi in self.ranges) or \
            any(fnmatchcase(description, g) for g in self.globs)


NOTHING = Selection()


@dataclass(frozen=True)
class Intent:
    controllable: Selection = NOTHING
    avoid: CPUSet = CPUSet()
    sinks: tuple[tuple[Selection, CPUSet], ...] = ()  # earlier wins for an IRQ two select


NO_INTENT = Intent()


def parse_selection(raw: Any, key: str) -> Selection:
    """A list of IRQ numbers, ranges and description globs (one may be given bare)."""
    if raw is None:
        return NOTHING
    if isinstance(raw, (str, int)) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, Sequence):
        raise ConfigValueError(f"{key}: expected a list of IRQ numbers, ranges (30-39) or description "
                               f"globs, got {short(raw)}")
    ranges: list[tuple[int, int]] = []
    globs: list[str] = []
    for i, item in enumerate(raw):
        where = f"{key}[{i}]"
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ConfigValueError(f"{where}: expected an IRQ number, range or glob, got {short(item)}")
        text = str(item).strip()
        lo, dash, hi = text.partition("-")
        if text.isdigit() or (dash and lo.isdigit() and hi.isdigit()):
            a, b = int(lo), int(hi) if dash else int(lo)
            if a > b or b >= MAX_IRQ:
                raise ConfigValueError(f"{where}: {short(text)} is not a range of IRQ numbers")
            ranges.append((a, b))
        elif text and not text.lstrip("-").isdigit():
            globs.append(text)
        else:
            raise ConfigValueError(f"{where}: {short(item)} is not an IRQ number, range or glob")
    return Selection(ranges=tuple(ranges), globs=tuple(globs))
