"""What a policy says about a container's processes and the node's interrupts beside its
CPUs: the scheduling class a container gets (policy/schedclass.py) and where the
controllable IRQs may go (policy/irqs.py). The engine enforces both (engine/nodectl.py).

`Tuned` is what a policy offers; `ExclusiveTuning` gives it to a policy whose IRQ rule is
"off the exclusive CPUs" (static, static-plus, topology-aware), reading its `usage()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from cri_resmgr.policy.api import Workload
from cri_resmgr.policy.irqs import Intent, Selection, parse_selection
from cri_resmgr.policy.schedclass import Choice, Rules, parse_rules
from cri_resmgr.policy.usage import PolicyUsage
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Tuned", "ExclusiveTuning", "TUNING_OPTIONS"]

TUNING_OPTIONS = ("SchedulingClasses", "NamespaceSchedulingClasses", "PodQoSSchedulingClasses",
                  "ControllableInterrupts")


@runtime_checkable
class Tuned(Protocol):
    def scheduling_class(self, workload: Workload) -> Choice:
        """The scheduling class of a placed (or about to be placed) container."""

    def irq_intent(self) -> Intent:
        """Where the controllable IRQs may go, for the allocations as they are now."""

    @property
    def tunes(self) -> bool:
        """Whether the configuration has scheduling classes or controllable IRQs at all."""

    @property
    def moves_irqs(self) -> bool:
        """Whether it has controllable IRQs."""


class ExclusiveTuning:
    """Scheduling classes by annotation, namespace and QoS class; controllable IRQs kept
    off every container's exclusive CPUs."""

    _rules: Rules
    _irqs: Selection

    def _parse_tuning(self, options: Mapping[str, Any], section: str) -> None:
        self._rules = parse_rules(options, section)
        self._irqs = parse_selection(options.get("ControllableInterrupts"), f"{section}.ControllableInterrupts")

    def usage(self) -> PolicyUsage:  # the policy's own
        raise NotImplementedError

    @property
    def tunes(self) -> bool:
        return bool(self._rules.classes or self._irqs)

    @property
    def moves_irqs(self) -> bool:
        return bool(self._irqs)

    def scheduling_class(self, workload: Workload) -> Choice:
        return self._rules.choose(workload)

    def irq_intent(self) -> Intent:
        if not self._irqs:
            return Intent()
        return Intent(controllable=self._irqs, avoid=CPUSet().union(*self.usage().exclusive.values()))
