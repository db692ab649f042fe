"""The benchmark behind `make bench` still runs end to end (tiny load)."""
from __future__ import annotations

from tests.bench.webhook import format_table, run


def test_benchmark_runs_and_every_review_is_patched_and_logged():
    result = run(clients=4, reviews=40, max_seconds=60)
    assert result["errors"] == 0, result["first_error"]
    assert result["reviews"] == 40
    assert result["logged_reviews"] == 40
    assert result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    table = format_table(result)
    assert "reviews/s" in table and "p99 latency (ms)" in table
