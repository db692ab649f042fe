"""The option file (`-config FILE`): command-line options, one per line.

Each line is an option name without leading dashes, then its value after a space
or '=' (`policy static`, `dump=reset,full:.*`); a flag stands alone
(`logger-debug`). Blank lines and lines starting with '#' are ignored. The file's
options come before the command line's, so the command line wins.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Collection

from cri_resmgr.bounded import short
from cri_resmgr.errors import CriResmgrError

_LINE = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9-]*)(?:\s*[= ]\s*(?P<value>.*))?$")


class OptionFileError(CriResmgrError, ValueError):
    pass


def read_option_file(path: str, known: Collection[str] | None = None,
                     paths: Collection[str] = ()) -> list[str]:
    """Returns the file's options as command-line tokens; an option not in `known`
    (when given) is an error naming the file and the line. The value of an option in
    `paths` that is a relative path is taken relative to the file's directory, not to
    wherever the command was started ('-' and `unix:` addresses are left as they are)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise OptionFileError(f"cannot read option file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise OptionFileError(f"option file {path} is not UTF-8 text") from None
    tokens: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise OptionFileError(f"{path}:{number}: cannot parse {short(raw.strip())} (expected 'name value')")
        if m["name"] == "config":
            raise OptionFileError(f"{path}:{number}: an option file cannot include another (config)")
        if known is not None and m["name"] not in known:
            near = difflib.get_close_matches(m["name"], list(known), n=1, cutoff=0.75)
            raise OptionFileError(f"{path}:{number}: no such option: {m['name']}" +
                                  (f" (did you mean {near[0]}?)" if near else ""))
        tokens.append("-" + m["name"])
        if m["value"] is not None and m["value"] != "":
            value = m["value"].strip()
            if m["name"] in paths and value != "-" and not value.startswith(("/", "unix:")):
                value = os.path.join(os.path.dirname(os.path.abspath(path)), value)
            tokens.append(value)
    return tokens


def expand_config(argv: list[str], known: Collection[str] | None = None, paths: Collection[str] = ()) -> list[str]:
    """Replaces `-config FILE` (any spelling) in argv by the file's options, placed first."""
    out: list[str] = []
    prefix: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-config", "--config"):
            if i + 1 >= len(argv):
                raise OptionFileError(f"option {arg} requires a file argument")
            prefix += read_option_file(argv[i + 1], known, paths)
            i += 2
            continue
        if arg.startswith(("-config=", "--config=")):
            prefix += read_option_file(arg.split("=", 1)[1], known, paths)
            i += 1
            continue
        if arg == "--":
            out += argv[i:]
            break
        out.append(arg)
        i += 1
    return prefix + out
