"""Masking of secret-looking values in dumped messages.

Dumps end up in bug reports; CreateContainer carries the container's environment,
which is where Kubernetes puts secrets mounted as env vars, and the runtimes' verbose
status replies carry it again inside their `info` JSON (the CRI config's `envs`, the
OCI spec's `process.env`).  We mask by name, not value, because values give no
reliable hint: an environment variable's name, an annotation's key, a command-line
flag's name (`--api-token=X`, `--api-token X`) or an argument's `NAME=` (`env
API_TOKEN=X app`).  The same rules hold for the message and for the JSON inside its
`info` map, so the one never shows what the other masks.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cri_resmgr.bounded import InputError, load_json

REDACTED = "***redacted***"
# An `info` value bigger than this is not parsed (bounded cost on the writer thread);
# containerd's is some 10-30 kB for a container.
MAX_INFO_CHARS = 1 << 20

# Case-insensitive substrings of a variable name that mark its value as secret.
SECRET_NAME_PARTS: tuple[str, ...] = (
    "PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "SECRET", "KEY", "CREDENTIAL",
    "AUTH", "PRIVATE", "CERT", "SESSION", "COOKIE", "SIGNATURE",
)
_SECRET_NAME = re.compile("|".join(SECRET_NAME_PARTS), re.IGNORECASE)
# `--name=value`, `-name=value` or `NAME=value` in an argument list.
_NAMED_ARG = re.compile(r"(-{0,2}[A-Za-z_][\w.-]*)=(.*)", re.DOTALL)
# `--name` or `-name` alone: its value may be the next argument.
_FLAG_ARG = re.compile(r"-{1,2}[A-Za-z_][\w.-]*")


def looks_secret(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def redact_envs(body: Any) -> Any:
    """Mask, in place, the secret-looking values of a decoded body and return it.

    ``body`` is a message already turned into dicts and lists (or decoded JSON).
    Whatever the nesting, these are masked by name:

    * ``envs`` lists of CRI KeyValue entries (``{"key", "value"}``): the value;
    * ``env`` lists of ``KEY=VALUE`` strings (the OCI spec's process and hooks): VALUE;
    * ``annotations`` maps: the value of a secret-looking key;
    * ``args``, ``command`` and ``cmd`` (ExecSync's) lists: see `redact_args`;
    * ``info`` maps of strings (the verbose status replies): each value is JSON, read at
      a bounded cost, masked by these same rules and written back as JSON of the same
      shape; a value that cannot be read so is replaced by a note saying why.
    """
    if isinstance(body, dict):
        for field, value in body.items():
            if field == "envs" and isinstance(value, list):
                for env in value:
                    if isinstance(env, dict) and "value" in env and looks_secret(str(env.get("key", ""))):
                        env["value"] = REDACTED
            elif field == "env" and isinstance(value, list):
                body[field] = [_redact_assignment(item) if isinstance(item, str) else redact_envs(item)
                               for item in value]
            elif field == "annotations" and isinstance(value, dict):
                for key in value:
                    if looks_secret(str(key)):
                        value[key] = REDACTED
            elif field in ("args", "command", "cmd") and isinstance(value, list) \
                    and all(isinstance(arg, str) for arg in value):
                body[field] = redact_args(value)
            elif field == "info" and isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
                for key, text in value.items():
                    value[key] = REDACTED if looks_secret(str(key)) else redact_json_text(text)
            else:
                redact_envs(value)
    elif isinstance(body, list):
        for value in body:
            redact_envs(value)
    return body


def _redact_assignment(text: str) -> str:
    name, sep, _ = text.partition("=")
    return f"{name}={REDACTED}" if sep and looks_secret(name) else text


def redact_args(args: list[str]) -> list[str]:
    """A command line with the values of secret-looking names masked: `--api-token=X`
    and `API_TOKEN=X` keep their name, and the argument after a lone `--api-token` (when
    it is no flag itself) is masked whole. Free text, such as a `sh -c` script, is not
    looked into."""
    out: list[str] = []
    mask_next = False
    for arg in args:
        if mask_next and not arg.startswith("-"):
            out.append(REDACTED)
            mask_next = False
            continue
        named = _NAMED_ARG.fullmatch(arg)
        if named is not None:
            out.append(f"{named.group(1)}={REDACTED}" if looks_secret(named.group(1)) else arg)
            mask_next = False
        else:
            out.append(arg)
            mask_next = _FLAG_ARG.fullmatch(arg) is not None and looks_secret(arg)
    return out


def redact_json_text(text: str) -> str:
    """`text` (a verbose `info` value) with its secrets masked, as JSON again: unchanged
    when nothing was masked; a note instead when it is too big, too deep or not JSON,
    because what cannot be read cannot be masked."""
    if not text.strip():
        return text
    if len(text) > MAX_INFO_CHARS:
        return f"{REDACTED} ({len(text)} characters, more than the {MAX_INFO_CHARS} looked into for secrets)"
    try:
        data = load_json(text, "verbose info")
    except InputError as err:
        return f"{REDACTED} ({len(text)} characters that could not be looked into for secrets: {err})"
    if not isinstance(data, (dict, list)):
        return text
    before = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    after = json.dumps(redact_envs(data), ensure_ascii=False, separators=(",", ":"))
    return text if after == before else after
