"""Where the resource-manager configuration comes from, highest first:
-force-config, the last configuration the agent pushed (kept in the state
directory), -fallback-config (or, without it, a fallback document the front end
was handed: the NRI plugin's configuration text from the runtime), built-in defaults."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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


def read_config_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"cannot read configuration file {path}: {e.strerror}") from None


def _saved_agent_config(path: Path) -> dict[str, str] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):  # nothing saved; an unusable state dir is refused at start
        return None
    except (OSError, ValueError) as e:
        log.error("cannot read %s: %s", path, e)
        return None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        log.error("%s is not a saved agent configuration; ignoring it", path)
        return None
    return data


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
