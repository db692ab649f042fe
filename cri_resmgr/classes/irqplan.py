"""Where each controllable IRQ goes, from a policy's intent: a decision without I/O.

An IRQ a sink selects goes to that sink's CPUs (the first sink that selects it); any
other keeps what it had when the resource manager found it, less the CPUs to avoid; if
that leaves nothing, every online CPU but those; if even that is nothing, what it had (an
IRQ must go somewhere, and the kernel refuses an empty affinity). The plan is a pure
function of (IRQs, online CPUs, intent), so the caller diffs it with what it last wrote
and writes only the IRQs that change: a busy node's hundreds of IRQs cost a loop, not
hundreds of writes, on every decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cri_resmgr.policy.irqs import Intent
from cri_resmgr.topology.cpuset import CPUSet


@dataclass(frozen=True)
class Irq:
    number: int
    description: str  # /proc/interrupts' chip and device, for description globs
    original: CPUSet  # its smp_affinity_list when first read


def plan(irqs: Mapping[int, Irq], online: CPUSet, intent: Intent) -> dict[int, CPUSet]:
    """The affinity each of `irqs` (the controllable ones) is to have."""
    out: dict[int, CPUSet] = {}
    spare = online - intent.avoid
    # IRQs share a few original affinities (every CPU, after boot): each is computed once,
    # not per IRQ (a CPUSet difference costs more than the rest of the loop).
    kept: dict[CPUSet, CPUSet] = {}
    sinks = [(selection, cpus) for selection, cpus in intent.sinks if cpus]
    for number, irq in irqs.items():
        sink = next((cpus for selection, cpus in sinks if selection.selects(number, irq.description)), None)
        if sink is not None:
            out[number] = sink
            continue
        target = kept.get(irq.original)
        if target is None:
            target = kept[irq.original] = (irq.original - intent.avoid) or spare or irq.original
        out[number] = target
    return out


def changes(targets: Mapping[int, CPUSet], current: Mapping[int, CPUSet]) -> dict[int, CPUSet]:
    """The IRQs whose target differs from what they hold."""
    return {n: cpus for n, cpus in targets.items() if current.get(n) != cpus}
