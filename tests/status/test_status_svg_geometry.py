"""The SVG of `cri-resmgr status` laid out so it can be read (issue 38): every policy on 2,
32 and 4096 CPUs, from a /state document the simulator built as the relay would; no line of
text past the canvas or over another (boxes estimated from the font size and the character
count), pool colours that do not read as one another, and a pool summary that says what the
pool table says."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from functools import cache
from typing import Any

import pytest

from cri_resmgr.config import parse_document
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.report import state_document
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.status import svg, view

SVG = "{http://www.w3.org/2000/svg}"
FONT = 12  # the picture's font size (px)
POLICIES = ("static", "static-plus", "topology-aware", "balloons")
SHAPES = {2: "1s/1c/2t", 32: "2s/4n/8c/2t", 4096: "8s/16n/256c/2t"}
BALLOONS = """
  balloons:
    BalloonTypes:
      - Name: dedicated
        MatchExpressions: [{key: qosclass, operator: In, values: [Guaranteed]}]
        PreferNewBalloons: true
      - Name: batch
        Namespaces: [ns1, ns2]
"""


@cache
def document(policy: str, cpus: int) -> dict[str, Any]:
    """The final /state of a small churn, with what a relay adds: the node, the time, the
    version, and a configuration path as long as a real one."""
    config = f"policy:\n  Active: {policy}\n  ReservedResources:\n    CPU: 1\n" + \
        (BALLOONS if policy == "balloons" else "")
    registry = default_registry()
    parsed = parse_document(config, f"/etc/cri-resmgr/configurations/{policy}-{cpus}-cpus.yaml", registry.names())
    live = {2: 2, 32: 20, 4096: 60}[cpus]
    o = simulate(churn_calls(4 * live, seed=3, target=live), topology_of(SHAPES[cpus]), parsed, policy, registry,
                 keep_steps=False)
    doc = state_document(o)
    doc.update(node="worker-node-17.cluster.example.com", taken_at=1796000000.0, relay_version="0.1.0")
    return doc


def _boxes(image: str) -> tuple[float, float, list[tuple[float, float, float, float, str]]]:
    """The canvas (width, height) and each text element's estimated box (x0, y0, x1, y1, text):
    monospace, CHAR wide a character, the font's height above the baseline and a fifth of it
    below."""
    root = ET.fromstring(image)
    assert root.get("font-size") == str(FONT) and root.get("font-family") == "monospace"
    boxes = []
    for t in root.iter(f"{SVG}text"):
        text = t.text or ""
        x, y, w = float(t.get("x", 0)), float(t.get("y", 0)), len(text) * svg.CHAR
        x0 = x - w if t.get("text-anchor") == "end" else x
        boxes.append((x0, y - FONT * 0.8, x0 + w, y + FONT * 0.2, text))
    return float(root.get("width", 0)), float(root.get("height", 0)), boxes


def _overlaps(boxes: list[tuple[float, float, float, float, str]]) -> list[tuple[str, str]]:
    """Pairs of boxes that overlap, found by rows of the picture (cheap on 4096 CPUs)."""
    rows: dict[int, list[tuple[float, float, float, float, str]]] = {}
    for b in boxes:
        for row in range(int(b[1] // 8), int(b[3] // 8) + 1):
            rows.setdefault(row, []).append(b)
    found = set()
    for row in rows.values():
        row.sort()
        for i, a in enumerate(row):
            for b in row[i + 1:]:
                if b[0] >= a[2]:
                    break
                if a[1] < b[3] and b[1] < a[3]:
                    found.add((a[4], b[4]))
    return sorted(found)


@pytest.mark.parametrize("cpus", list(SHAPES))
@pytest.mark.parametrize("policy", POLICIES)
def test_no_text_past_the_canvas_or_over_other_text(policy, cpus):
    width, height, boxes = _boxes(svg.render(view.build(document(policy, cpus))))
    assert boxes
    outside = [b[4][:60] for b in boxes if b[0] < 0 or b[1] < 0 or b[2] > width or b[3] > height]
    assert not outside, f"{len(outside)} texts past the {width:g}x{height:g} canvas: {outside[:3]}"
    over = _overlaps(boxes)
    assert not over, f"{len(over)} texts drawn over others: {over[:3]}"
    # The title and the stamp are both there, each whole on a line.
    texts = [b[4] for b in boxes]
    assert any(t.startswith(f"Policy {policy}, configuration from /etc/") for t in texts)
    assert "node worker-node-17.cluster.example.com, 2026-11-30 00:53:20 UTC, cri-resmgr 0.1.0" in texts


def test_the_pools_line_is_wrapped_and_summarised():
    doc = document("topology-aware", 4096)
    doc = {**doc, "pools": {**doc["pools"], "exclusive": ",".join(str(c) for c in range(0, 4096, 2))}}
    lines = svg.pools_lines(view.build(doc), 120)
    assert lines[0].startswith("Pools: ") and all(len(line) <= 120 for line in lines)
    assert "(2048 CPUs)" in "".join(lines)


def _lab(colour: str) -> tuple[float, float, float]:
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92 for c in rgb]
    xyz = ((r * 0.4124 + g * 0.3576 + b * 0.1805) / 0.95047, r * 0.2126 + g * 0.7152 + b * 0.0722,
           (r * 0.0193 + g * 0.1192 + b * 0.9505) / 1.08883)
    fx, fy, fz = [v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in xyz]
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def test_pool_colours_are_told_apart():
    """CIE76 distance of at least 18 between any two pool fills (two greens at 6.9 were
    taken for one pool)."""
    fills = list(svg.POOL_FILLS.values()) + list(svg.OTHER_FILLS)
    close = [(a, b, round(sum((x - y) ** 2 for x, y in zip(_lab(a), _lab(b), strict=True)) ** 0.5, 1))
             for a, b in itertools.combinations(fills, 2)]
    assert not [c for c in close if c[2] < 18], sorted(close, key=lambda c: c[2])[:3]


def test_the_pool_summary_says_what_the_pool_table_says():
    """Balloons: a dedicated balloon's CPUs (its container's own) in the summary, not `-`; no
    empty `reserved` beside `reserved[0]`."""
    v = view.build(document("balloons", 32))
    table = {p.name: p.runs_on for p in v.pool_table}
    summary = dict(v.pools)
    assert "reserved" not in summary and "reserved[0]" in summary
    assert any(name.startswith("dedicated[") for name in table)
    for name, runs_on in table.items():
        assert summary[name] == runs_on, name


def test_a_cpu_in_two_pools_is_not_drawn_as_the_wider_one():
    """static's reserved CPU is in the shared pool too: `shared/reserved` in the reserved colour,
    not in the shared one beside `shared` in the legend."""
    root = ET.fromstring(svg.render(view.build(document("static", 32))))
    cpu0 = next(g for g in root.iter(f"{SVG}g") if (g.findtext(f"{SVG}title") or "").startswith("CPU 0: "))
    assert "shared/reserved" in cpu0.findtext(f"{SVG}title")
    assert cpu0.find(f"{SVG}rect").get("fill") == svg.POOL_FILLS["reserved"]
