"""`cri-resmgr status [-address HOST:PORT] [-o text|json|svg] [FILE]`: asks a running
relay's `/state` (on its -metrics-address) and draws it, or writes it to FILE."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from cri_resmgr import flags
from cri_resmgr.bounded import parse_json
from cri_resmgr.status import svg, text, view

# The metrics address scripts/node/cri-resmgr.default suggests; the agent's health is on 8891.
DEFAULT_ADDRESS = "127.0.0.1:8888"

ADDRESS = flags.text("address", "HOST:PORT", "The relay's -metrics-address, where it serves /state "
                     "(':PORT' is 127.0.0.1:PORT).", DEFAULT_ADDRESS)
OUTPUT = flags.choice("o", "Output: a text picture (colour on a terminal unless NO_COLOR is set), the raw JSON, "
                      "or an SVG image.", ("text", "json", "svg"), "text")
SAVED = flags.text("state", "FILE", "Draw a saved /state document (what `cri-resmgr status -o json` wrote) "
                   "instead of asking a relay: for a bug report, or a node you cannot reach.", None)
COMMAND = flags.Command(
    "cri-resmgr status",
    "Show what the running relay decided: the machine as packages > NUMA nodes > cores > threads, each CPU "
    "marked with who holds it (an exclusive container's short name; shared, reserved, isolated, idle), the "
    "pools, and every container with its pool, CPUs and mems. A FILE argument (after the flags) receives the "
    "output instead of stdout; it is never the input: a saved /state is drawn with -state FILE (`status -state "
    "node.json`, `status -state node.json -o svg node.svg`), and a FILE that is a saved /state is refused, "
    "not overwritten, unless -o json.",
    (ADDRESS, OUTPUT, SAVED),
    operands="[FILE]",
)


def main(argv: Sequence[str]) -> int:
    args, file = split_file(argv, COMMAND)
    return COMMAND.run(args, lambda values: _status(values, file))


def split_file(argv: Sequence[str], command: flags.Command) -> tuple[list[str], str | None]:
    """The flags, and the one argument that is not a flag or a flag's value (FILE).
    More than one such argument is left among the flags, for the parser's usage error."""
    with_value = {f.name for f in command.flags if not f.is_switch}
    args: list[str] = []
    others: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg.startswith("-") and arg != "-":
            args.append(arg)
            if "=" not in arg and arg.lstrip("-") in with_value and rest:
                args.append(rest.pop(0))
        else:
            others.append(arg)
    return args + others[1:], (others[0] if others else None)


def fetch(address: str, timeout: float = 5.0) -> dict[str, Any]:
    """The relay's /state document; raises CommandError saying why not."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/state"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            doc: dict[str, Any] = json.load(response)
            return doc
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise flags.CommandError(f"no /state at {address}: not a cri-resmgr relay's -metrics-address, or one "
                                     "older than `cri-resmgr status`") from None
        raise flags.CommandError(f"the relay at {address} answered {e.code}: {e.read().decode().strip()}") from None
    except (OSError, ValueError) as e:  # refused, timed out, not JSON
        raise flags.CommandError(f"no state from {address} ({e}); the relay serves it on its -metrics-address, "
                                 "give that with -address") from None


def load(path: str) -> dict[str, Any]:
    """A saved /state document; raises CommandError naming the file and what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = parse_json(f.read())
    except OSError as e:
        raise flags.CommandError(f"cannot read {path}: {e.strerror}") from None
    except (ValueError, RecursionError) as e:
        raise flags.CommandError(f"{path} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise flags.CommandError(f"{path} is not a cri-resmgr state document (a JSON object)")
    return doc


def _status(values: flags.Values, file: str | None) -> int:
    address = values[ADDRESS]
    if not address.rpartition(":")[2].isdigit():
        raise flags.UsageError(f"invalid value for -address: {address!r}: expected HOST:PORT (or :PORT)")
    saved = values[SAVED]
    if file is not None and values[OUTPUT] != "json" and _is_saved_state(file):
        raise flags.UsageError(f"{file} is a saved /state: did you mean -state {file}? (FILE receives the "
                               "output; it is left as it is)")
    doc = fetch(address) if saved is None else load(saved)
    out = render(doc, values[OUTPUT], colour=file is None and _colour_wanted())
    if file is None:
        sys.stdout.write(out)
        return 0
    try:
        with open(file, "w") as f:
            f.write(out)
    except OSError as e:
        raise flags.CommandError(f"cannot write {file}: {e}") from None
    return 0


def _is_saved_state(path: str) -> bool:
    """A file there is holding a /state document (`status -o json` wrote it, whatever its name):
    `status node.json` almost surely meant to draw it, and writing the picture over it would lose it.
    Only a file that starts as a JSON object and is not huge is read whole."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > 256 << 20:
            return False
        with open(path, encoding="utf-8") as f:
            if f.read(64).lstrip()[:1] != "{":
                return False
            f.seek(0)
            doc = parse_json(f.read())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("format") == "cri-resmgr-state"


def render(doc: dict[str, Any], output: str, colour: bool = False) -> str:
    """The document as the -o format asks; raises CommandError if it is not a /state document."""
    if output == "json":
        return json.dumps(doc, indent=2) + "\n"
    try:
        v = view.build(doc)
    except (view.StateError, KeyError, TypeError) as e:
        raise flags.CommandError(f"cannot read the relay's state: {e}") from None
    return svg.render(v) if output == "svg" else text.render(v, colour) + "\n"


def _colour_wanted() -> bool:
    # https://no-color.org: NO_COLOR set and not empty turns colour off.
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
