"""A HideHyperthreads balloon owns whole cores and its containers run on one thread of each
(as nri-plugins' balloons do): the sibling threads are the balloon's, not idle, in
`cri-resmgr simulate`'s report, in /state (`hidden_cpus`) and in `status`'s text and SVG
(issue 29: "hidden hyperthreads drawn as the balloon's")."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from balloons_sim import run

from cri_resmgr import cli
from cri_resmgr.simulate.report import state_document
from cri_resmgr.status import svg, text, view
from cri_resmgr.topology.cpuset import CPUSet

SHAPE = "1s/4c/2t"  # cores 0-3, threads (0,4) (1,5) (2,6) (3,7)
CONFIG = """
policy:
  Active: balloons
  ReservedResources: {CPU: "cpuset:0"}
  balloons:
    BalloonTypes:
      - Name: dpdk
        Namespaces: [dpdk]
        HideHyperthreads: true
        MaxCPUs: 2
"""
PODS = """
- {name: fw, namespace: dpdk, containers: [{name: c, resources: {requests: {cpu: 2}, limits: {cpu: 2}}}]}
"""


def test_simulate_reports_the_hidden_threads_of_the_balloon(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(textwrap.dedent(CONFIG))
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PODS))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "-force-config", str(tmp_path / "c.yaml"), "-pods", str(tmp_path / "p.yaml"),
                  "-shape", SHAPE, "-o", "json"])
    out, err = capsys.readouterr()
    assert not exit_.value.code, err
    pool = json.loads(out)["steps"][-1]["pools"]["dpdk[0]"]
    cpus, runs_on, hidden = (CPUSet(pool[k]) for k in ("cpus", "runs_on", "hidden"))
    assert len(cpus) == 4 and len(runs_on) == 2 and hidden == cpus - runs_on and len(hidden) == 2


def _state() -> tuple[dict, CPUSet, CPUSet]:
    o, at = run(CONFIG, PODS, SHAPE)
    doc = state_document(o)
    row = next(p for p in doc["pool_table"] if p["name"] == "dpdk[0]")
    runs_on = at["fw:c"].cpus
    return doc, CPUSet(row["hidden_cpus"]), runs_on


def test_state_carries_them_and_status_draws_them_as_the_balloons() -> None:
    doc, hidden, runs_on = _state()
    assert len(hidden) == 2 and len(runs_on) == 2 and hidden.isdisjoint(runs_on)
    v = view.build(doc)
    cells = {c.cpu: c for _, nodes in v.machine for _, cores in nodes for _, cs in cores for c in cs}
    assert all(cells[c].label == "dpdk[0]" and cells[c].hidden for c in hidden)  # was "idle"
    assert all(cells[c].label == "dpdk[0]" and not cells[c].hidden for c in runs_on)
    assert sum(c.label == "idle" for c in cells.values()) == 8 - 1 - 4  # the rest: neither reserved nor the balloon's
    picture = text.render(v)
    for c in hidden:
        assert f"CPU {c} dpdk[0] (hidden)" in picture
    image = svg.render(v)
    root = ET.fromstring(image)  # well-formed
    ns = "{http://www.w3.org/2000/svg}"
    assert root.find(f"{ns}defs/{ns}pattern[@id='hidden']") is not None
    fills = svg.pool_fills(v)
    for group in root.iter(f"{ns}g"):
        title = group.findtext(f"{ns}title") or ""
        cpu = int(re.match(r"CPU (\d+):", title).group(1))  # type: ignore[union-attr]
        rects = [r.get("fill") for r in group.iter(f"{ns}rect")]
        if cpu in hidden:  # the balloon's colour, hatched over
            assert rects == [fills["dpdk[0]"], "url(#hidden)"] and "hidden hyperthread" in title, (cpu, rects)
        else:
            assert "url(#hidden)" not in rects and "hidden" not in title
    assert ">hidden hyperthread</text>" in image  # in the legend


def test_a_balloon_without_the_option_hides_nothing_and_old_documents_still_draw() -> None:
    o, at = run(CONFIG.replace("HideHyperthreads: true", "HideHyperthreads: false"), PODS, SHAPE)
    doc = state_document(o)
    assert all(p["hidden_cpus"] == "" for p in doc["pool_table"])
    assert "url(#hidden)" not in svg.render(view.build(doc))
    doc, hidden, _ = _state()
    for p in doc["pool_table"]:
        del p["hidden_cpus"]  # a /state from before the field: those threads show idle, as they did
    cells = {c.cpu: c for _, nodes in view.build(doc).machine for _, cores in nodes for _, cs in cores for c in cs}
    assert all(cells[c].label == "idle" and not cells[c].hidden for c in hidden)
