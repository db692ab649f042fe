"""A balloon type's scheduling class and interrupts, and the policy's lists of them.

    policy:
      balloons:
        SchedulingClasses: [{Name: rt, Policy: fifo, Priority: 10}]   # policy/schedclass.py
        ControllableInterrupts: ["30-39", "virtio*"]                     # policy/irqs.py
        BalloonTypes:
          - Name: dataplane
            SchedulingClass: rt     # its containers' class, unless an annotation names another
            IRQClaim: ["36"]        # these controllable IRQs...
            IRQMode: sink           # ...go to its balloons' CPUs
          - Name: quiet
            IRQMode: isolate        # no controllable IRQ lands on its balloons' CPUs

The balloons policy's `irq_intent` is built from these (policy.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cri_resmgr.bounded import short
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.irqs import NOTHING, Selection, parse_selection
from cri_resmgr.policy.schedclass import Rules, class_name, parse_rules

if TYPE_CHECKING:
    from cri_resmgr.policy.balloons.types import BalloonType

TUNING_POLICY_OPTIONS = ("SchedulingClasses", "ControllableInterrupts")
TUNING_TYPE_OPTIONS = ("SchedulingClass", "IRQClaim", "IRQMode")
IRQ_MODES = ("sink", "isolate")


@dataclass(frozen=True)
class BalloonTuning:
    sched_class: str = ""
    irq_claim: Selection = NOTHING
    irq_mode: str = ""  # "", "sink", "isolate"

    @classmethod
    def of(cls, entry: Mapping[str, Any], where: str) -> BalloonTuning:
        """A balloon type entry's own keys (its SchedulingClass is checked by parse_tuning)."""
        name = entry.get("SchedulingClass") or ""
        if not isinstance(name, str):
            raise ConfigValueError(f"{where}.SchedulingClass: expected a scheduling class name, got {short(name)}")
        claim = parse_selection(entry.get("IRQClaim"), f"{where}.IRQClaim")
        mode_raw = entry.get("IRQMode")
        mode = "" if mode_raw is None else mode_raw.strip().lower() if isinstance(mode_raw, str) else None
        if mode is None or mode not in ("", *IRQ_MODES):
            raise ConfigValueError(f"{where}.IRQMode: {short(mode_raw)} is not one of {', '.join(IRQ_MODES)}")
        if claim and mode == "":
            mode = "sink"  # a claim alone: its IRQs come to the balloon
        if mode == "sink" and not claim:
            raise ConfigValueError(f"{where}.IRQMode: sink needs IRQClaim (the IRQs to take)")
        if mode == "isolate" and claim:
            raise ConfigValueError(f"{where}.IRQClaim: an isolating balloon takes no IRQs (IRQMode: isolate)")
        return cls(sched_class=name, irq_claim=claim, irq_mode=mode)


def parse_tuning(options: Mapping[str, Any], types: Iterable[BalloonType], section: str) -> tuple[Rules, Selection]:
    """The policy's SchedulingClasses and ControllableInterrupts; every type's
    SchedulingClass must name one, and IRQ modes need the list."""
    rules = parse_rules(options, section, with_defaults=False)
    irqs = parse_selection(options.get("ControllableInterrupts"), f"{section}.ControllableInterrupts")
    for t in types:
        where = f"{section}.BalloonTypes[{t.order if t.order >= 0 else 'Name=reserved'}]"
        class_name(t.tuning.sched_class, rules.classes, f"{where}.SchedulingClass")
        if t.tuning.irq_mode and not irqs:
            raise ConfigValueError(f"{where}.IRQMode: {t.tuning.irq_mode} needs {section}.ControllableInterrupts "
                                   "(the IRQs the policy may move)")
    return rules, irqs
