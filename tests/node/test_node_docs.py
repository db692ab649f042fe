"""The install docs name what exists: the README section links the node guide, and every
repository path the guide mentions is there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "node-install.md"


def test_readme_has_the_install_section_and_links_the_guide():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Install on a node", 1)[1].split("\n## ", 1)[0]
    assert "make install-node" in section and "(docs/node-install.md)" in section


def test_repository_paths_in_the_guide_exist():
    named = set(re.findall(r"`((?:scripts|cri_resmgr|agent|webhook|docs)/[\w./-]+)`", GUIDE.read_text()))
    assert "scripts/node/cri-resmgr.service" in named
    assert [p for p in sorted(named) if not (REPO / p).exists()] == []


def test_the_guide_states_the_state_file_version_the_cache_writes():
    from cri_resmgr.engine.cache import STATE_FILE, STATE_FORMAT, STATE_VERSION

    text = GUIDE.read_text()
    assert f"format `{STATE_FORMAT}`, version {STATE_VERSION}" in text.replace("\n", " ")
    assert STATE_FILE in text
