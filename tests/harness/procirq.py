"""A kernel-like /proc for IRQ affinity tests and benchmarks: `proc/interrupts` with numbered
lines (per-CPU counts, chip, device) and the per-CPU lines the kernel adds, and each IRQ's
`proc/irq/N/smp_affinity_list` holding every CPU, as after boot."""

from __future__ import annotations

from pathlib import Path


def kernel_like_proc(root: Path, irqs: int, cpus: int = 8, first: int = 24) -> list[int]:
    """Writes the tree under `root`; returns the IRQ numbers."""
    lines = ["          " + "".join(f"CPU{i:<8}" for i in range(cpus))]
    numbers = list(range(first, first + irqs))
    for n in numbers:
        name = f"virtio{n % 7}-input.{n}" if n % 2 else f"nvme0q{n}"
        lines.append(f"{n:4}: " + " ".join("0" for _ in range(cpus)) + f"  PCI-MSIX-0000:00:{n % 32:02x}.0 "
                     f"{n}-edge      {name}")
        d = root / "proc" / "irq" / str(n)
        d.mkdir(parents=True, exist_ok=True)
        (d / "smp_affinity_list").write_text(f"0-{cpus - 1}\n")
    lines += ["NMI:  " + " ".join("0" for _ in range(cpus)) + "  Non-maskable interrupts",
              "LOC:  " + " ".join("9" for _ in range(cpus)) + "  Local timer interrupts"]
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "interrupts").write_text("\n".join(lines) + "\n")
    return numbers


def affinities(root: Path) -> dict[int, str]:
    """Each IRQ's smp_affinity_list under `root`."""
    return {int(d.name): (d / "smp_affinity_list").read_text().strip()
            for d in (root / "proc" / "irq").iterdir() if d.name.isdigit()}
