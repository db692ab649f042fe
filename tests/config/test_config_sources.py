"""The configuration sources' order (cri_resmgr/config/sources.py), with a fallback
document handed to the front end (the NRI plugin's ConfigureRequest.config)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from cri_resmgr.config import ConfigError
from cri_resmgr.config.sources import AGENT_CONFIG_FILE, Document, initial_config, without_agent

NAMES = ["none", "static"]
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
NONE = "policy:\n  Active: none\n"


@dataclass(frozen=True)
class Places:
    state_dir: str
    force_config: str | None = None
    fallback_config: str | None = None


def test_the_fallback_document_is_used_when_no_flag_or_agent_configuration_is_there(tmp_path: Path) -> None:
    doc = Document(STATIC, "the runtime's text")
    assert initial_config(Places(str(tmp_path)), NAMES, doc).policy.active == "static"
    assert without_agent(Places(str(tmp_path)), NAMES, doc).policy.active == "static"
    assert initial_config(Places(str(tmp_path)), NAMES).policy.active is None  # no document: defaults


def test_flags_and_a_saved_agent_configuration_come_before_the_fallback_document(tmp_path: Path) -> None:
    doc = Document(STATIC, "the runtime's text")
    fallback = tmp_path / "fallback.yaml"
    fallback.write_text(NONE)
    assert initial_config(Places(str(tmp_path), fallback_config=str(fallback)), NAMES, doc).policy.active == "none"
    assert initial_config(Places(str(tmp_path), force_config=str(fallback)), NAMES, doc).policy.active == "none"
    (tmp_path / AGENT_CONFIG_FILE).write_text(json.dumps({"policy": "Active: none\n"}))
    assert initial_config(Places(str(tmp_path)), NAMES, doc).policy.active == "none"


def test_a_bad_fallback_document_is_named_in_the_error(tmp_path: Path) -> None:
    doc = Document("policy:\n  Active: static\n  NoSuchKey: 1\n", "the runtime's text")
    with pytest.raises(ConfigError, match="the runtime's text.*NoSuchKey"):
        initial_config(Places(str(tmp_path)), NAMES, doc)
