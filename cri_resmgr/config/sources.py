"""Where the resource-manager configuration comes from, highest first:
-force-config, the last configuration the agent pushed (kept in the state
directory), -fallback-config (or, without it, a fallback document the front end
was handed: the NRI plugin's configuration text from the runtime), built-in defaults."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cri_resmgr.bounded import InputError, load_json
from cri_resmgr.config.schema import Config, ConfigError, parse_document, parse_modules

log = logging.getLogger(__name__)

AGENT_CONFIG_FILE = "agent-config.json"


class Places(Protocol):
    """Where configurations are read and kept: `Settings` (the front end's,
    for -print-config) and `EngineSettings` (the controller's) both are."""

    @property
    def force_config(self) -> str | None: ...
    @property
    def fallback_config(self) -> str | None: ...
    @property
    def state_dir(self) -> str: ...


@dataclass(frozen=True)
class Document:
    """A configuration document that came as text, and where it came from (for errors)."""

    text: str
    source: str


def initial_config(settings: Places, policy_names: Sequence[str], fallback: Document | None = None) -> Config:
    """The configuration to start with (see the module docstring)."""
    names = list(policy_names)
    if settings.force_config:
        return parse_document(read_config_file(settings.force_config), settings.force_config, names)
    saved = _saved_agent_config(agent_config_path(settings))
    if saved is not None:
        try:
            return parse_modules(saved, "last agent configuration", names)
        except ConfigError as e:
            log.error("ignoring the saved agent configuration: %s", e)
    return without_agent(settings, names, fallback)


def without_agent(settings: Places, policy_names: Sequence[str], fallback: Document | None = None) -> Config:
    """What is in force when no agent configuration applies: -fallback-config, else
    the `fallback` document, else the defaults."""
    if settings.fallback_config:
        return parse_document(read_config_file(settings.fallback_config), settings.fallback_config,
                              list(policy_names))
    if fallback is not None:
        return parse_document(fallback.text, fallback.source, list(policy_names))
    return Config()


def agent_config_path(settings: Places) -> Path:
    return Path(settings.state_dir) / AGENT_CONFIG_FILE


def remember_agent_config(settings: Places, modules: Mapping[str, str]) -> None:
    """Keeps an accepted agent configuration for the next start; an empty one
    (no ConfigMap applies) is forgotten, so the next start uses the fallback."""
    path = agent_config_path(settings)
    if modules:
        _write_json(path, dict(modules))
    else:
        path.unlink(missing_ok=True)


MAX_CONFIG_SIZE = 4 << 20  # bytes; a configuration is some kilobytes


def read_config_file(path: str) -> str:
    """The file's text; ConfigError naming the file when it cannot be read, is too
    big to be a configuration, or is not UTF-8 (with the offset of the first bad byte)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_SIZE + 1)
    except OSError as e:
        raise ConfigError(f"cannot read configuration file {path}: {e.strerror}") from None
    if len(data) > MAX_CONFIG_SIZE:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_SIZE >> 20} MiB: not a configuration file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})") from None


def _saved_agent_config(path: Path) -> dict[str, str] | None:
    """The saved agent configuration; one that cannot be read is moved aside (as
    the state file is) so that it is looked at once, not at every start."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_SIZE + 1)
    except (FileNotFoundError, NotADirectoryError):  # nothing saved; an unusable state dir is refused at start
        return None
    except OSError as e:
        log.error("cannot read %s: %s", path, e.strerror)
        return None
    try:
        if len(raw) > MAX_CONFIG_SIZE:
            raise InputError(f"{path}: larger than {MAX_CONFIG_SIZE >> 20} MiB")
        data = load_json(raw, str(path), max_depth=4)
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise InputError(f"{path}: not a saved agent configuration (module name -> YAML text)")
    except InputError as e:
        log.error("ignoring the saved agent configuration: %s; %s", e, move_aside(path))
        return None
    return data


def move_aside(path: Path) -> str:
    """Renames an unusable file to PATH.bad-TIME (UTC, readable); says where it went."""
    aside = path.with_name(f"{path.name}.bad-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    try:
        os.replace(path, aside)
    except OSError as e:
        return f"could not move it aside: {e.strerror}"
    return f"moved aside to {aside}"


def _write_json(path: Path, data: Any) -> None:
    """Atomically: a crash leaves the old file or the new one, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
