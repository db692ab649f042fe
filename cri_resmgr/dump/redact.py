"""Masking of secret-looking environment variables in dumped messages.

Dumps end up in bug reports; CreateContainer carries the container's environment,
which is where Kubernetes puts secrets mounted as env vars.  We mask by variable
name, not value, because values give no reliable hint.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***redacted***"

# Case-insensitive substrings of a variable name that mark its value as secret.
SECRET_NAME_PARTS: tuple[str, ...] = (
    "PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "SECRET", "KEY", "CREDENTIAL",
    "AUTH", "PRIVATE", "CERT", "SESSION", "COOKIE", "SIGNATURE",
)
_SECRET_NAME = re.compile("|".join(SECRET_NAME_PARTS), re.IGNORECASE)


def looks_secret(name: str) -> bool:
    return _SECRET_NAME.search(name) is not None


def redact_envs(body: Any) -> Any:
    """Mask, in place, secret values of every ``envs`` key/value list in a decoded body.

    ``body`` is a message already turned into dicts and lists.  Only lists named
    ``envs`` whose entries look like CRI KeyValue are touched; string maps such as
    ContainerStatus' verbose ``info`` are left as they are.
    """
    if isinstance(body, dict):
        for field, value in body.items():
            if field == "envs" and isinstance(value, list):
                for env in value:
                    if isinstance(env, dict) and "value" in env and looks_secret(str(env.get("key", ""))):
                        env["value"] = REDACTED
            else:
                redact_envs(value)
    elif isinstance(body, list):
        for value in body:
            redact_envs(value)
    return body
