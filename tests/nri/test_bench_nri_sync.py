"""The nri-sync bench section runs and measures what it says (a few containers; the
figures themselves come from `make bench`)."""

from __future__ import annotations

from tests.bench import nri_sync


def test_both_starts_place_every_container_and_are_timed() -> None:
    result = nri_sync.run_policy("static", containers=20)
    for phase in ("first", "restart"):
        r = result[phase]
        assert r["placed"] == 20 and r["updates"] == 20
        assert r["active_ms"] > 0 and r["sync_ms"] > 0 and r["sync_cpu_ms"] >= 0
    text = nri_sync.format_result({"containers": 20, "policies": {"static": result},
                                   "targets": [{"target": "t", "verdict": "PASS"}]})
    assert "static" in text and "restart" in text
