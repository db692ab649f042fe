"""`make bench`'s scale section runs (with few containers): every policy on both shapes, the
ratios and one target per policy are there; no timing is asserted (make bench reports it)."""

from __future__ import annotations

from tests.bench import scale
from tests.bench.__main__ import SECTIONS


def test_scale_section_reports_both_shapes_and_the_ratio_per_policy():
    result = scale.run(containers=60, log=lambda text: None)
    assert result["cpus"] == {"small": 64, "big": 4096}
    assert list(result["policies"]) == scale.POLICIES and len(result["targets"]) == len(scale.POLICIES)
    assert result["errors"] == []
    for r in result["policies"].values():
        assert r["small"]["checker_violations"] == r["big"]["checker_violations"] == 0
        for what in ("decision", "call"):
            assert r["small"][what]["n"] > 60 and r["big"][what]["n"] > 60
            assert r["ratio"][what]["cpu"] > 0
    assert {t["verdict"] for t in result["targets"]} <= {"PASS", "MISS"}
    text = scale.format_result(result)
    assert "4096 CPUs" in text and "load average" in text and "topology-aware" in text
    assert "scale" in SECTIONS
