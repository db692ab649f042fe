"""Block-style YAML for decoded messages, without PyYAML's representer.

PyYAML's representer is pure Python and costs ~0.5 ms for a ten-container
ListContainers reply; the dump writer shares the GIL with the relay, so the
human format emits the small YAML subset it needs itself: dicts, lists, str,
int, float, bool, None.  Strings are written plain when PyYAML would read them
back as the same string, else as JSON strings (valid YAML double-quoted
scalars).  tests/dump/test_dump_format.py round-trips the output through yaml.safe_load.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any

import yaml

_PLAIN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./@+=:-]*")
_NOT_PRINTABLE = re.compile("[\x7f-\x9f\ufeff]")
_STR_TAG = "tag:yaml.org,2002:str"
# types-PyYAML leaves Resolver.resolve untyped: this is what it takes and returns (a tag).
_resolve: Callable[[type[yaml.Node], str, tuple[bool, bool]], str] = yaml.resolver.Resolver().resolve


def to_yaml(obj: Any, indent: int = 0) -> str:
    """YAML text for obj (normally a dict), every line indented by `indent` spaces."""
    lines: list[str] = []
    _node(obj, indent, lines)
    return "".join(line + "\n" for line in lines)


def _node(obj: Any, indent: int, lines: list[str]) -> None:
    if isinstance(obj, dict) and obj:
        _mapping(obj, indent, lines)
    elif isinstance(obj, list) and obj:
        _sequence(obj, indent, lines)
    else:
        lines.append(" " * indent + _scalar(obj))


def _mapping(d: dict[object, object], indent: int, lines: list[str]) -> None:
    pad = " " * indent
    for key, value in d.items():
        k = _string(str(key))
        if isinstance(value, (dict, list)) and value:
            lines.append(f"{pad}{k}:")
            # Lists under a key are written at the key's indentation, as kubectl does.
            _node(value, indent if isinstance(value, list) else indent + 2, lines)
        else:
            lines.append(f"{pad}{k}: {_scalar(value)}")


def _sequence(items: list[object], indent: int, lines: list[str]) -> None:
    pad = " " * indent
    for item in items:
        if isinstance(item, (dict, list)) and item:
            sub: list[str] = []
            _node(item, indent + 2, sub)
            sub[0] = f"{pad}- {sub[0][indent + 2:]}"
            lines.extend(sub)
        else:
            lines.append(f"{pad}- {_scalar(item)}")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "." not in text:  # YAML 1.1 floats need a dot: 1e-09 would load as a string
            mantissa, e, exponent = text.partition("e")
            text = f"{mantissa}.0{e}{exponent}"
        return text
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _string(str(value))


@functools.lru_cache(maxsize=8192)  # field names and ids repeat across messages
def _string(s: str) -> str:
    if _PLAIN.fullmatch(s) and not s.endswith(":") and \
            _resolve(yaml.ScalarNode, s, (True, False)) == _STR_TAG:
        return s
    quoted = json.dumps(s, ensure_ascii=False)
    return _NOT_PRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)
