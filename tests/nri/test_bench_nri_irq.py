"""The nri-irq bench section runs and measures what it says (few containers and IRQs; the
figures come from `make bench`): every container placed, the IRQs off the isolated
balloons' CPUs after the reply, and every IRQ's affinity back after the plugin stops."""

from __future__ import annotations

from tests.bench import nri_irq


def test_irqs_follow_the_isolated_balloons_and_are_restored() -> None:
    result = nri_irq.run(containers=20, irqs=40)
    with_irqs = result["cases"]["40 IRQs"]
    assert with_irqs["placed"] == 20 and with_irqs["restored"] and with_irqs["irqs_ms"] is not None
    assert result["cases"]["no IRQs"]["irqs_ms"] is None
    assert "40 IRQs" in nri_irq.format_result(result)
