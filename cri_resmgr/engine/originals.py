"""What host files held before this resource manager first wrote them, kept in the state
directory so that a restart, even after a crash (SIGKILL), gives back the value of before
the first run rather than taking what the last run wrote for the original. One file per
kind of control (CPU classes' cpufreq files, controllable IRQs' affinities), each a flat
map of a host path to its original text, written whole and renamed into place."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from cri_resmgr.bounded import InputError, load_json

log = logging.getLogger(__name__)

VERSION = 1
MAX_BYTES = 4 << 20  # 1024 CPUs' files, or thousands of IRQs, at most a few hundred kB
MAX_VALUE = 256


def load(path: str, what: str, things: str) -> dict[str, str]:
    """The map kept at `path` (empty when there is none); `what` and `things` name it in a
    warning ("CPU classes", "the CPUs")."""
    try:
        with open(path, "rb") as f:
            data = load_json(f.read(MAX_BYTES + 1), path)
    except FileNotFoundError:
        return {}
    except (OSError, InputError) as e:
        log.warning("%s: cannot read what %s held before (%s); what loses its setting keeps the last one",
                    what, things, e)
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("version") == VERSION else None
    if not isinstance(files, dict):
        log.warning("%s: %s is not a file of this version; ignored", what, path)
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str) and len(v) < MAX_VALUE}


def save(path: str, originals: Mapping[str, str], what: str) -> None:
    """Written whole and renamed into place: a crash leaves the old file or the new one.
    An empty map removes the file (nothing is held)."""
    try:
        if not originals:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        tmp = f"{path}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": VERSION, "files": dict(sorted(originals.items()))}, f)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("%s: cannot keep what the host's files held before in %s: %s", what, path, e)
