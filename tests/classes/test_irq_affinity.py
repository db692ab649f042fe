"""IRQ affinity on a kernel-like /proc tree (`proc/interrupts`, `proc/irq/N/smp_affinity_list`
as the kernel lays them out): the plan without I/O, only changed IRQs written, never one
outside ControllableInterrupts, and what was there put back."""

from __future__ import annotations

from pathlib import Path

from cri_resmgr.classes.hostfs import HostRoot
from cri_resmgr.classes.irq import IrqWriter, parse_interrupts
from cri_resmgr.classes.irqplan import Irq, changes, plan
from cri_resmgr.policy.irqs import Intent, parse_selection
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.procirq import kernel_like_proc


class Counting(HostRoot):
    def __init__(self, root: str):
        super().__init__(root)
        self.writes: list[str] = []

    def write(self, rel: str, text: str) -> None:
        self.writes.append(rel)
        super().write(rel, text)


def _aff(root: Path, n: int) -> str:
    return (root / "proc" / "irq" / str(n) / "smp_affinity_list").read_text().strip()


def test_parse_keeps_the_description_after_the_counts():
    text = "           CPU0       CPU1\n 36:          0     254010 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n" \
           "NMI:          0          0   Non-maskable interrupts\n"
    assert parse_interrupts(text) == {36: "PCI-MSIX-0000:00:02.0 1-edge virtio1-req.0"}


def test_plan_sinks_avoid_and_never_empty():
    irqs = {1: Irq(1, "a", CPUSet("0-3")), 2: Irq(2, "net-rx", CPUSet("2-3")), 3: Irq(3, "b", CPUSet("2-3"))}
    intent = Intent(controllable=parse_selection([1, 2, 3], "k"), avoid=CPUSet("2-3"),
                    sinks=((parse_selection(["net-*"], "k"), CPUSet("3")),))
    assert plan(irqs, CPUSet("0-3"), intent) == {1: CPUSet("0-1"), 2: CPUSet("3"), 3: CPUSet("0-1")}
    everywhere = Intent(controllable=intent.controllable, avoid=CPUSet("0-3"))
    assert plan(irqs, CPUSet("0-3"), everywhere)[3] == CPUSet("2-3")  # must go somewhere: where it was
    assert changes({1: CPUSet("0-1"), 2: CPUSet("3")}, {1: CPUSet("0-1"), 2: CPUSet("2-3")}) == {2: CPUSet("3")}


def test_only_controllable_irqs_are_touched_only_changed_ones_written_and_all_restored(tmp_path):
    kernel_like_proc(tmp_path, 40)
    files = Counting(str(tmp_path))
    w = IrqWriter(files)
    w.select(parse_selection(["30-33", "*virtio*-input.41"], "k"))
    assert sorted(w.irqs) == [30, 31, 32, 33, 41]
    intent = Intent(controllable=parse_selection(["30-33"], "k"), avoid=CPUSet("4-7"))
    assert w.write(changes(plan(w.irqs, CPUSet("0-7"), intent), w.current())) == (5, [])
    assert [_aff(tmp_path, n) for n in (30, 33, 41, 29, 34, 42)] == ["0-3", "0-3", "0-3", "0-7", "0-7", "0-7"]
    files.writes.clear()
    assert w.write(changes(plan(w.irqs, CPUSet("0-7"), intent), w.current())) == (0, [])
    assert files.writes == []  # nothing changed: nothing written, not even read
    w.write({29: CPUSet("1"), 30: CPUSet("1")})
    assert _aff(tmp_path, 29) == "0-7"  # outside the list: never written
    w.select(parse_selection(["30-33"], "k"))  # 41 no longer controllable: back as it was
    assert _aff(tmp_path, 41) == "0-7"
    assert w.restore()[1] == []
    assert {_aff(tmp_path, n) for n in range(24, 64)} == {"0-7"}


def test_a_write_the_kernel_refuses_is_said_and_not_retried(tmp_path):
    import errno

    class ManagedIrq(Counting):  # the kernel's EIO for an IRQ whose affinity it manages
        def write(self, rel: str, text: str) -> None:
            if rel == "proc/irq/25/smp_affinity_list":
                self.writes.append(rel)
                raise OSError(errno.EIO, "Input/output error")
            super().write(rel, text)

    kernel_like_proc(tmp_path, 4)
    files = ManagedIrq(str(tmp_path))
    w = IrqWriter(files)
    w.select(parse_selection(["24-27"], "k"))
    written, errors = w.write({24: CPUSet("1"), 25: CPUSet("1")})
    assert written == 1 and len(errors) == 1 and "IRQ 25" in errors[0] and "Input/output error" in errors[0]
    files.writes.clear()
    assert w.write({25: CPUSet("2")}) == (0, []) and files.writes == []
