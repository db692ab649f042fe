"""The policy benchmark runs end to end (on a small machine; no timing asserted)."""

from __future__ import annotations

from tests.bench import policy as bench_policy


def test_bench_run_reports_every_phase_for_both_policies(make_topology):
    topo = make_topology(sockets=2, cores_per_die=8, threads_per_core=2, numa_per_socket=2,
                         isolated=range(24, 32))
    result = bench_policy.run(containers=60, churn=5, seed=3, topology=topo)
    assert result["topology"] == {"cpus": 32, "numa_nodes": 4, "isolated": "24-31"}
    for name in ("static", "static-plus"):
        r = result[name]
        assert r["create"]["n"] == 60 and r["remove"]["n"] == 60 and r["churn"]["n"] == 10
        for phase in ("create", "churn", "remove"):
            s = r[phase]
            assert 0 <= s["p50_ms"] <= s["p99_ms"] <= s["max_ms"]
        assert r["exclusive_containers"] > 0
        assert r["max_others"] > 0
