"""The nri-sync bench section runs and measures what it says (a few containers; the
figures themselves come from `make bench`)."""

from __future__ import annotations

import os

from tests.bench import nri_sync


def test_both_starts_place_every_container_and_are_timed() -> None:
    result = nri_sync.run_policy("static", containers=20)
    for phase in ("first", "restart"):
        r = result[phase]
        assert r["placed"] == 20 and r["updates"] == 20
        assert r["active_ms"] > 0 and r["sync_ms"] > 0 and r["sync_cpu_ms"] >= 0
    text = nri_sync.format_result({"sizes": [{"containers": 20, "policies": {"static": result}}],
                                   "targets": [{"target": "t", "verdict": "PASS"}]})
    assert "static" in text and "restart" in text


def test_a_run_reports_each_size_against_its_target_and_ends_its_load() -> None:
    with nri_sync.busy_load(1) as pids:
        assert len(pids) == 1 and os.path.exists(f"/proc/{pids[0]}")
    assert not os.path.exists(f"/proc/{pids[0]}") or "Z" in open(f"/proc/{pids[0]}/stat").read().split()[2]
    result = nri_sync.run(containers=(10, 1001), policies=("static",))
    assert [s["containers"] for s in result["sizes"]] == [10, 1001]
    assert [t["target"].split(" <= ")[1].split()[0] for t in result["targets"]] == ["200", "1500"]
    assert "1001" in nri_sync.format_result(result)
