"""docs/architecture.md's layer table and .importlinter's layers contract name the same parts:
every folder and module at the package's root is in a layer of the contract and named in the
docs, and every module of the front ends' folders (`relay/`, `nri/`, `frontend/`) is named in
its own row of the table (issue 25 item 2 moved eight root modules and added folders; a new
module there must say where it belongs)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "cri_resmgr"
DOC = (REPO / "docs" / "architecture.md").read_text()


def _layers() -> set[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    names = config["importlinter:contract:layers"]["layers"].replace("|", "\n").split()
    return {n.strip() for n in names if n.strip()}


def _root_parts() -> list[str]:
    return sorted(p.name if p.is_dir() else p.stem for p in PACKAGE.iterdir()
                  if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__"))


def _row(folder: str) -> str:
    """The table's row whose folder column names `folder/`."""
    rows = [line for line in DOC.splitlines() if line.startswith("|") and f"`{folder}/`" in line.split("|")[2]]
    assert len(rows) == 1, f"{folder}/: {len(rows)} rows of the table name it"
    return rows[0]


def test_every_root_part_is_in_a_layer_and_named_in_the_docs() -> None:
    layers = _layers()
    parts = _root_parts()
    assert "frontend" in parts and "relay" in parts  # the listing sees what it should
    assert [p for p in parts if f"cri_resmgr.{p}" not in layers] == []
    assert [p for p in parts if f"`{p}/`" not in DOC and f"`{p}.py`" not in DOC] == []


def test_every_front_end_module_is_named_in_its_row() -> None:
    for folder in ("relay", "nri", "frontend"):
        row = _row(folder)
        modules = sorted(f.name for f in (PACKAGE / folder).glob("*.py") if f.name != "__init__.py")
        named = set(re.findall(r"`(?:" + folder + r"/)?([a-z_]+\.py)`", row))
        assert [m for m in modules if m not in named] == [], folder
