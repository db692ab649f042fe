"""The balloons benchmark runs (small): its figures are there and its machine is right;
no timing is asserted here (make bench reports it)."""

from __future__ import annotations

from tests.bench import balloons


def test_bench_runs_and_reports_every_phase():
    topo = balloons.build_topology()
    assert len(topo.online) == 512
    result = balloons.measure(topo, containers=300, churn=30)
    assert result["balloons"] == 100  # PreferNewBalloons: every type's ten exist
    assert {"create", "churn", "remove", "all"} <= set(result)
    assert result["all"]["n"] == 300 + 2 * 30 + 300
    assert result["max_others"] > 0  # knock-on updates happened and were counted
    text = balloons.format_result({**result, "targets": [{"target": "x", "verdict": "PASS"}]})
    assert "100 balloons" in text
