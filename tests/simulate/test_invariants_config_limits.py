"""The isolation invariant knows what the configuration allows (issue 38): a request beyond a
balloon type's MaxCPUs, or beyond what static-plus's shared pool must keep beside its reserved
CPUs, is a request not met (a warning), not a policy fault; the same policies failing a
request they could meet are still caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr.cli import main
from cri_resmgr.config import parse_document
from cri_resmgr.policy import static_plus
from cri_resmgr.policy.balloons import policy as balloons_policy
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.realsysfs import unpack

CAPPED = """policy:
  Active: balloons
  balloons:
    BalloonTypes:
      - Name: big
        Namespaces: ["*"]
        MaxCPUs: 8
        PreferNewBalloons: true
"""


def _pod(name: str, cpu: int) -> str:
    return (f"- {{name: {name}, containers: [{{name: c, resources: {{limits: {{cpu: {cpu}, memory: 64Mi}}, "
            f"requests: {{cpu: {cpu}, memory: 64Mi}}}}}}]}}\n")


def _run(config: str, pods: str, topo, policy: str = ""):
    registry = default_registry()
    return simulate(pod_calls(parse_pods(pods, "pods.yaml")), topo, parse_document(config, "c.yaml", registry.names()),
                    policy, registry)


def test_a_request_above_a_balloon_types_max_cpus_is_no_violation(tmp_path: Path, capsys):
    """The issue's case, through the command line: exit 0, the call under "requests not met"."""
    (tmp_path / "c.yaml").write_text(CAPPED)
    (tmp_path / "pods.yaml").write_text(_pod("g12", 12))
    with pytest.raises(SystemExit) as exited:
        main(["simulate", "-shape", "2s/4n/8c/2t", "-pods", str(tmp_path / "pods.yaml"),
              "-force-config", str(tmp_path / "c.yaml"), "-brief"])
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    assert "Warnings (requests not met): 1" in out
    assert "all hold" in out.split("Invariants")[1]


def test_a_balloon_holding_fewer_than_its_cap_allows_is_still_a_violation(monkeypatch):
    """Under MaxCPUs 8, a dedicated container of 6 CPUs, and one of 12 (judged by the 8 its type
    allows), reported holding no exclusive CPUs (the fault made by hand) are both caught."""
    o = _run(CAPPED, _pod("g12", 12) + _pod("g6", 6), topology_of("2s/4n/8c/2t"))
    assert o.checker.count == 0, o.checker.violations
    monkeypatch.setattr(balloons_policy.BalloonsPolicy, "_exclusive", lambda self, b: CPUSet())
    o = _run(CAPPED, _pod("g12", 12) + _pod("g6", 6), topology_of("2s/4n/8c/2t"))
    bad = [v for v in o.checker.violations if "although the requests fit" in v]
    assert any("g12" in v and "of 12 CPUs holds 0" in v for v in bad), o.checker.violations
    assert any("g6" in v and "of 6 CPUs holds 0" in v for v in bad), o.checker.violations


STATIC_PLUS = "policy:\n  Active: static-plus\n  ReservedResources:\n    CPU: 1\n"


def test_static_plus_keeps_a_shared_cpu_beside_the_reserved_one():
    """19 exclusive CPUs of 20 with one reserved: static-plus's shared pool keeps one more (its
    reserved CPU is a pool of its own), so 19 cannot be given; 18 can, and are."""
    topo = topology_of("1s/10c/2t")
    o = _run(STATIC_PLUS, _pod("g", 19), topo)
    assert o.warnings and o.checker.count == 0, o.checker.violations
    o = _run(STATIC_PLUS, _pod("g", 18), topo)
    assert not o.warnings and o.checker.count == 0


def test_static_plus_giving_less_than_it_could_is_still_a_violation(monkeypatch):
    """With the shared pool's floor known, a static-plus that refuses 18 exclusive CPUs, which
    fit beside its reserved CPU and its shared one (the fault made by hand), is caught."""
    real = static_plus.StaticPlusPolicy._place

    def short(self, workload, prefer):
        if workload.cpu_request == 18000:
            workload = type(workload)(**{**workload.__dict__, "cpu_request": 500})
        return real(self, workload, prefer)

    monkeypatch.setattr(static_plus.StaticPlusPolicy, "_place", short)
    o = _run(STATIC_PLUS, _pod("g", 18), topology_of("1s/10c/2t"))
    assert any("although the requests fit" in v for v in o.checker.violations), o.checker.violations


def test_static_plus_on_the_real_desktop(tmp_path: Path):
    """The real machine it was seen on (20 CPUs, a reserved one): a 19-CPU pod."""
    root = unpack("xeon-desktop-server-4socket.tar.bz2", tmp_path)
    if root is None:
        pytest.skip("the real-machine sysfs dumps are not here (tests/harness/realsysfs.py)")
    o = _run(STATIC_PLUS, _pod("g", 19), discover(root / "sysfs/desktop"))
    assert o.warnings and o.checker.count == 0, o.checker.violations
