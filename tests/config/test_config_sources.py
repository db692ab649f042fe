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


@pytest.mark.parametrize("content", [b"[" * 200_000 + b"]" * 200_000, b"{not json", b"\xff\xfe",
                                     json.dumps({"policy": {"deep": 1}}).encode(), b"[1]"])
def test_an_unreadable_saved_agent_configuration_is_moved_aside(tmp_path: Path, content: bytes, caplog) -> None:
    """Issue 28.5: any state file that cannot be read is moved aside, and the start goes on."""
    (tmp_path / AGENT_CONFIG_FILE).write_bytes(content)
    fallback = tmp_path / "fallback.yaml"
    fallback.write_text(STATIC)
    assert initial_config(Places(str(tmp_path), fallback_config=str(fallback)), NAMES).policy.active == "static"
    assert not (tmp_path / AGENT_CONFIG_FILE).exists()
    assert len(list(tmp_path.glob(AGENT_CONFIG_FILE + ".bad-*"))) == 1
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("cri_resmgr")]
    assert len(lines) == 1 and "ignoring the saved agent configuration" in lines[0] and len(lines[0]) < 400


@pytest.mark.parametrize("content,message", [
    (b"policy:\n  Active: static  # \xff\n", "not UTF-8 text (byte 28"),
    (b"a: " + b"[" * 5000 + b"]" * 5000, "nested deeper than 64 levels"),
    (b"policy:\n  Active: 1" + b"0" * 5000, "policy.Active: a number of 5001 digits"),
])
def test_a_bad_configuration_file_is_one_line_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        initial_config(Places(str(tmp_path), force_config=str(path)), NAMES)
    assert str(e.value).startswith(str(path)) and message in str(e.value) and len(str(e.value)) < 300, str(e.value)
