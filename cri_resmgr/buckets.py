"""Latency histograms as plain integer lists, for code on a hot path.

Observing costs one bisect and two additions: prometheus_client is never called
per event. `frontend/metrics.py` turns a snapshot into Prometheus histograms at scrape
time. Standard library only, so every layer may import it (as `errors.py`).

A snapshot is taken from another thread (the metrics server) while the event
loop keeps counting; copying a list is atomic under the GIL, so a snapshot is at
worst one observation behind in its sum.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

# Upper bounds (inclusive, as Prometheus' `le`) in nanoseconds: 50 us to 10 s.
# A relayed call takes 0.2-1 ms, a CreateContainer 10 ms, a policy decision 0.1 ms.
BOUNDS_NS: tuple[int, ...] = (
    25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000, 100_000_000,
    250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000, 10_000_000_000,
)


@dataclass(frozen=True)
class HistogramSnapshot:
    counts: tuple[int, ...]  # per bucket of BOUNDS_NS, not cumulative; the last one is +Inf
    sum_ns: int

    @property
    def count(self) -> int:
        return sum(self.counts)


class Histogram:
    __slots__ = ("counts", "sum_ns")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS_NS) + 1)
        self.sum_ns = 0

    def observe_ns(self, ns: int) -> None:
        self.counts[bisect_left(BOUNDS_NS, ns)] += 1
        self.sum_ns += ns

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(tuple(self.counts), self.sum_ns)
