"""Reads and writes IRQ affinities through the host interface (`hostfs`: `-host-root`,
dry-run): `proc/interrupts` for the IRQs and their descriptions, and
`proc/irq/N/smp_affinity_list` of the IRQs a configuration makes controllable, never of
another. Each controllable IRQ's affinity is read once, when it first becomes
controllable (what `restore` puts back); after that this process knows what it wrote, so a
plan costs only the writes of the IRQs that change. What an earlier run kept of the
originals (`adopt`: a run killed before its shutdown) is taken instead of the file's
value, which is that run's write, and given back to the IRQs no longer controllable."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping

from cri_resmgr.classes.hostfs import HostFiles
from cri_resmgr.classes.irqplan import Irq
from cri_resmgr.policy.irqs import Selection
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

# A write the kernel will never take: the IRQ's affinity is the kernel's (managed IRQs:
# EIO), or the file is read-only. Such an IRQ is left alone from then on.
UNWRITABLE = (errno.EIO, errno.EPERM, errno.EACCES, errno.EROFS)


def parse_interrupts(text: str) -> dict[int, str]:
    """IRQ number -> description of each numbered line of /proc/interrupts (the per-CPU
    counts skipped, as nri-plugins does)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        head, _, rest = line.strip().partition(":")
        if not head.isdigit():
            continue
        words = rest.split()
        i = next((i for i, w in enumerate(words) if not w.isdigit()), len(words))
        out[int(head)] = " ".join(words[i:])
    return out


class IrqWriter:
    """`note` hears each write, for the dump."""

    def __init__(self, files: HostFiles, note: Callable[[str], None] | None = None):
        self._files = files
        self._note = note
        self._irqs: dict[int, Irq] = {}  # the controllable IRQs
        self._current: dict[int, CPUSet] = {}  # what each holds, as far as we know
        self._unwritable: set[int] = set()
        self._adopted: dict[int, CPUSet] = {}  # an earlier run's originals, not yet taken or given back

    def adopt(self, originals: Mapping[int, CPUSet]) -> None:
        """What a previous run read first (it may not have given them back)."""
        self._adopted.update({n: cpus for n, cpus in originals.items() if n not in self._irqs})

    @property
    def adopted(self) -> dict[int, CPUSet]:
        """An earlier run's IRQs waiting to be taken or given back, with what they had."""
        return dict(self._adopted)

    def originals(self) -> dict[int, CPUSet]:
        """What each IRQ held before this run or an earlier one wrote it (to keep across a crash)."""
        return {**self._adopted, **{n: irq.original for n, irq in self._irqs.items()}}

    @property
    def irqs(self) -> Mapping[int, Irq]:
        return self._irqs

    def select(self, selection: Selection) -> list[int]:
        """Makes the IRQs `selection` names controllable (reading their affinities once);
        those no longer selected get back what they had. Returns the IRQs dropped."""
        text = self._files.read("proc/interrupts")
        found = parse_interrupts(text or "")
        chosen = {n: d for n, d in found.items() if selection.selects(n, d)}
        dropped = [n for n in self._irqs if n not in chosen]
        self.restore(dropped)
        for n in dropped:
            self._irqs.pop(n, None)
            self._current.pop(n, None)
        for n, description in chosen.items():
            if n in self._irqs:
                continue
            cpus = self._read(n)
            if cpus is None:
                continue  # listed, but no affinity to set (per-CPU IRQs)
            self._irqs[n] = Irq(n, description, self._adopted.pop(n, cpus))
            self._current[n] = cpus
        self._give_back_adopted(chosen)
        return dropped

    def _read(self, n: int) -> CPUSet | None:
        raw = self._files.read(f"proc/irq/{n}/smp_affinity_list")
        try:
            return CPUSet.parse(raw.strip()) if raw is not None else None
        except ValueError:
            return None

    def _give_back_adopted(self, chosen: Mapping[int, str]) -> None:
        """An earlier run's IRQs that are not controllable now get what they had before it;
        one that is gone (or never takes it) is forgotten."""
        for n in [n for n in self._adopted if n not in chosen]:
            original = self._adopted.pop(n)
            now = self._read(n)
            if now is None or now == original:
                continue
            rel = f"proc/irq/{n}/smp_affinity_list"
            try:
                self._files.write(rel, str(original))
            except OSError as e:
                log.error("irq: IRQ %d: writing back %s, what it had before an earlier run, to %s failed: %s", n,
                          original, self._files.show(rel), e.strerror or e)
                continue
            log.info("irq: IRQ %d given back %s, what it had before an earlier run", n, original)
            if self._note is not None:
                self._note(f"irq: wrote '{original}' to {self._files.show(rel)}")

    def write(self, targets: Mapping[int, CPUSet]) -> tuple[int, list[str]]:
        """Writes each target that differs from what the IRQ holds: (writes, errors)."""
        written, errors = 0, []
        for n in sorted(targets):
            cpus = targets[n]
            if n not in self._irqs or n in self._unwritable or self._current.get(n) == cpus or not cpus:
                continue
            rel = f"proc/irq/{n}/smp_affinity_list"
            try:
                self._files.write(rel, str(cpus))
            except OSError as e:
                if e.errno in UNWRITABLE:
                    self._unwritable.add(n)
                self._current.pop(n, None)  # unknown now: written again next time
                errors.append(f"IRQ {n} ({self._irqs[n].description}): writing {cpus} to "
                              f"{self._files.show(rel)} failed: {e.strerror or e}")
                continue
            written += 1
            self._current[n] = cpus
            if self._note is not None:
                self._note(f"irq: wrote '{cpus}' to {self._files.show(rel)}")
        return written, errors

    def restore(self, numbers: list[int] | None = None) -> tuple[int, list[str]]:
        """What the IRQs held when first read goes back (all of them: shutdown)."""
        chosen = self._irqs if numbers is None else {n: self._irqs[n] for n in numbers if n in self._irqs}
        return self.write({n: irq.original for n, irq in chosen.items()})

    def current(self) -> dict[int, CPUSet]:
        return dict(self._current)
