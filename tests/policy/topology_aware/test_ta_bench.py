"""The topology-aware benchmark runs end to end (on a small machine; no timing asserted)."""

from __future__ import annotations

from tests.bench import topology_aware as bench
from tests.bench.__main__ import SECTIONS
from tests.harness.sysfs import fake_topology


def test_bench_run_reports_every_phase_and_both_targets():
    topo = fake_topology(sockets=2, cores_per_die=8, numa_per_socket=2, memory_only_nodes=2)
    result = bench.run(containers=80, churn=5, seed=3, topology=topo)
    assert result["topology"] == {"cpus": 32, "numa_nodes": 4, "pools": 7}
    assert result["phases"]["create"]["cpu"]["n"] == 80 and result["phases"]["churn"]["wall"]["n"] == 10
    for phase in result["phases"].values():
        for s in phase.values():
            assert 0 <= s["p50_ms"] <= s["p99_ms"] <= s["max_ms"]
    assert result["exclusive_containers"] > 0 and result["max_others"] > 0
    assert [t["verdict"] in ("PASS", "MISS") for t in result["targets"]] == [True, True]
    text = bench.format_result(result)
    assert "restore of 80" in text and "decision p99" in text
    assert "topology-aware" in SECTIONS
