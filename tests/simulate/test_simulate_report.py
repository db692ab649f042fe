"""`cri-resmgr simulate -o json` lets a tool judge every step without re-deriving it, and
`-host-root` takes a tarball holding one directory with the host root (issue 24)."""

from __future__ import annotations

import json
import tarfile
import textwrap

import pytest

from cri_resmgr import cli
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import generate

CONFIG = """
policy:
  Active: balloons
  ReservedResources: {CPU: "cpuset:0"}
  balloons:
    BalloonTypes:
      - Name: dedicated
        MatchExpressions: [{key: qosclass, operator: In, values: [Guaranteed]}]
        PreferNewBalloons: true
"""
PODS = """
- {name: be, containers: [{name: c}]}
- {name: bu, containers: [{name: c, resources: {requests: {cpu: 250m, memory: 64Mi}, limits: {memory: 128Mi}}}]}
- {name: g1, containers: [{name: c, resources: {limits: {cpu: 3, memory: 1Gi}}}]}
- {name: g2, containers: [{name: c, resources: {limits: {cpu: 4, memory: 1Gi}}}]}
"""


def simulate(capsys, tmp_path, *args: str) -> tuple[int, str, str]:
    (tmp_path / "c.yaml").write_text(textwrap.dedent(CONFIG))
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PODS))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "-force-config", str(tmp_path / "c.yaml"), "-pods", str(tmp_path / "p.yaml"), *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_every_step_carries_what_judging_it_needs(capsys, tmp_path):
    code, out, err = simulate(capsys, tmp_path, "-shape", "1s/4c/2t", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["machine"]["reserved"] == "0" and doc["machine"]["available"] == "0-7"
    assert doc["machine"]["nodes"] == {"0": "0-7"} and doc["machine"]["threads_per_core"] == 2
    decided = {d["container"]: (s, d) for s in doc["steps"] for d in s["decisions"]}
    step, g2 = decided["default/g2:c"]
    assert g2["qos"] == "Guaranteed" and g2["requests"]["cpu_milli"] == 4000
    assert g2["requests"]["memory_bytes"] == 1 << 30  # from the limit: Guaranteed
    assert decided["default/bu:c"][1]["qos"] == "Burstable"
    assert decided["default/bu:c"][1]["requests"] == {"cpu_milli": 250, "cpu_limit_milli": None,
                                                      "memory_bytes": 0, "memory_limit_bytes": 128 << 20}
    # the balloon after the step: its own CPUs, exclusive to the one dedicated container in it
    pool = step["pools"][g2["pool"]]
    assert g2["pool"].startswith("dedicated[") and pool["kind"] == "dedicated"
    assert pool["cpus"] == g2["exclusive"] == g2["cpus"] and len(CPUSet.parse(pool["cpus"])) == 4
    assert pool["runs_on"] == pool["cpus"] and pool["containers"] == 1
    # the default balloon gave its CPU up: the update names the container, its pool, and
    # the pool is in the step as it is after it
    moved = step["updates"]
    assert set(moved) >= {"default/be:c", "default/bu:c"}
    assert {u["pool"] for u in moved.values()} == {"default[0]"}
    assert step["pools"]["default[0]"]["cpus"] == "" and moved["default/be:c"]["cpus"] == "0"
    assert doc["invariants"]["violations"] == 0


def host_root_tarball(tmp_path, name: str, layout: list[str]) -> str:
    for top in layout:
        generate(tmp_path / "tree" / top, sockets=1, cores_per_die=2, threads_per_core=2)
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        for top in sorted({t.split("/")[0] for t in layout}):
            tar.add(tmp_path / "tree" / top, arcname=top)
    return str(path)


def test_host_root_tarball_with_one_top_level_directory(capsys, tmp_path):
    path = host_root_tarball(tmp_path, "node.tgz", ["node-a/root"])
    code, out, err = simulate(capsys, tmp_path, "-host-root", path, "-print-machine")
    assert code == 0, err
    assert out.startswith("Machine: 4 online CPUs")


def test_host_root_tarball_holding_several_machines_is_an_error_naming_them(capsys, tmp_path):
    path = host_root_tarball(tmp_path, "many.tgz", ["lab/a", "lab/b"])
    code, _, err = simulate(capsys, tmp_path, "-host-root", path, "-print-machine")
    assert code == 2
    assert "holds 2 host roots (lab/a, lab/b)" in err and len(err.splitlines()) == 1
