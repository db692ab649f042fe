"""Reading and showing input nobody vouches for, at a bounded cost.

Pod annotations, configuration documents and state files come from outside: any of
them may be a YAML alias bomb, JSON nested a hundred thousand deep, a number of five
thousand digits or ten megabytes of text. What is read here is refused, with a
message naming where, before it can cost more than its size; what is shown of it in
an error or a log line (`short`, `clip`) is a few dozen characters, whatever it is.

Standard library and PyYAML only: every layer may use it.
"""

from __future__ import annotations

import gc
import json
import reprlib
from typing import Any

import yaml

__all__ = ["InputError", "short", "clip", "parse_json", "load_json", "load_yaml", "load_yaml_all", "check_depth",
           "MAX_DEPTH", "MAX_NODES", "MAX_DIGITS"]

MAX_DEPTH = 64  # nesting of mappings and lists; real documents have fewer than ten
MAX_NODES = 200_000  # values in a YAML document, aliases counted as what they stand for
MAX_DIGITS = 100  # an integer longer than this is no count or size of anything


class InputError(ValueError):
    """Input that cannot be read at a bounded cost; the message says where and why."""


class _Repr(reprlib.Repr):
    """reprlib's bounded repr, which looks at a few items of a few levels only (so an
    alias bomb costs nothing), without int's 4300-digit ValueError."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxstring = 60
        self.maxother = 40
        self.maxlong = 40
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 4

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an integer of {x.bit_length() * 30103 // 100000 + 1} digits>"
        return super().repr_int(x, level)


_REPR = _Repr()


def short(value: Any, limit: int = 80) -> str:
    """repr() of `value`, at most about `limit` characters, at a bounded cost."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a repr that fails is shown by its type
        text = f"<{type(value).__name__}>"
    return clip(text, limit)


def clip(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to about `limit` characters (saying how long it was)."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    if "\n" in text or "\r" in text:
        text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text


def check_depth(data: Any, limit: int = MAX_DEPTH, what: str = "input") -> None:
    """Raises InputError when `data` (decoded JSON or YAML) nests deeper than `limit`.
    Iterative: the check itself has no recursion to run out of."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    seen: set[int] = set()
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item  # type: ignore[assignment]
        else:
            continue
        if depth >= limit:
            raise InputError(f"{what}: nested deeper than {limit} levels")
        if id(item) in seen:  # shared (YAML aliases): looked at once
            continue
        seen.add(id(item))
        stack.extend((child, depth + 1) for child in children)


def parse_json(text: str | bytes) -> Any:
    """json.loads with the cyclic collector paused: JSON nested past the recursion limit
    is refused by a RecursionError from deep in the parser, and a collection started there
    (the parse allocates) would run the finalizers of whatever garbage is pending at that
    depth, where they fail too: "Exception ignored" lines for objects of no concern to
    this input (a test saw them fail it). Raises what json.loads raises."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if collecting:
            gc.enable()


def load_json(text: str | bytes, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads, with nesting bounded; InputError names `what`."""
    try:
        data = parse_json(text)
    except RecursionError:
        raise InputError(f"{what}: nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{what}: not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{what}: not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except ValueError as e:  # an integer past Python's digit limit
        raise InputError(f"{what}: not usable JSON: {clip(str(e), 80)}") from None
    check_depth(data, max_depth, what)
    return data


def load_yaml(text: str, what: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> Any:
    """yaml.safe_load after a pass over the document's events (iterative, cheap) that
    refuses nesting deeper than `max_depth`, more than `max_nodes` values counting
    each alias as the values it stands for (an alias bomb), and integers longer than
    MAX_DIGITS; the message names `what` and the key. Raises InputError, or
    yaml.YAMLError for a document that is not YAML."""
    _scan(text, what, max_depth, max_nodes)
    try:
        return yaml.load(text, Loader=_Loader)
    except RecursionError:  # the scan makes this unreachable; kept as a last guard
        raise InputError(f"{what}: nested deeper than {max_depth} levels") from None
    except ValueError as e:  # e.g. a timestamp or number the constructor refuses
        raise InputError(f"{what}: {clip(str(e), 80)}") from None


def load_yaml_all(text: str, what: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> list[Any]:
    """yaml.safe_load_all, bounded as `load_yaml` is (the limits hold for the stream:
    `max_nodes` counts the values of every document). libyaml parses when it is there
    (the values are SafeLoader's): a 10 MB scalar takes PyYAML's own parser some 15 s,
    libyaml's a fraction of one; a document it refuses is read again by PyYAML's (up to
    1 MiB), whose message says where it saw the problem, as yaml.safe_load's does."""
    _scan(text, what, max_depth, max_nodes)
    try:
        try:
            return list(yaml.load_all(text, Loader=_FastLoader))
        except yaml.YAMLError:
            if _FastLoader is _Loader or len(text) > _SLOW_PARSE_LIMIT:
                raise
        return list(yaml.load_all(text, Loader=_Loader))
    except RecursionError:  # the scan makes this unreachable; kept as a last guard
        raise InputError(f"{what}: nested deeper than {max_depth} levels") from None
    except ValueError as e:
        raise InputError(f"{what}: {clip(str(e), 80)}") from None


_Loader = yaml.SafeLoader  # what yaml.safe_load uses: the same values and messages
_EventLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FastLoader: type[Any] = _EventLoader
_SLOW_PARSE_LIMIT = 1 << 20  # the text of a bad document PyYAML's parser reads again, for its message


class _Frame:
    __slots__ = ("mapping", "index", "key", "size", "anchor")

    def __init__(self, mapping: bool, anchor: str | None) -> None:
        self.mapping = mapping
        self.index = 0
        self.key: str | None = None
        self.size = 1
        self.anchor = anchor


def _scan(text: str, what: str, max_depth: int, max_nodes: int) -> None:
    try:
        _scan_with(_EventLoader, text, what, max_depth, max_nodes)
    except yaml.YAMLError as e:
        if "nesting depth" in str(getattr(e, "problem", "")):
            raise InputError(f"{what}: nested deeper than {max_depth} levels") from None
        # libyaml refuses some documents PyYAML reads (it stops nesting at 1000):
        # PyYAML's parser, iterative too, has the last word.
        try:
            _scan_with(yaml.SafeLoader, text, what, max_depth, max_nodes)
        except yaml.YAMLError:
            return  # not YAML: the loader's own error says where


def _scan_with(loader_type: type[Any], text: str, what: str, max_depth: int, max_nodes: int) -> None:
    stack: list[_Frame] = []
    sizes: dict[str, int] = {}  # anchor -> values it stands for
    total = 0

    def path() -> str:
        parts: list[str] = []
        for f in stack:
            if f.mapping:
                if f.key is not None:
                    parts.append(("." if parts else "") + clip(f.key, 40))
            else:
                parts.append(f"[{f.index}]")
        text = "".join(parts) or "(top)"
        return text if len(text) <= 120 else f"{text[:80]}...{text[-30:]}"

    def count(size: int) -> None:
        nonlocal total
        total += size
        if total > max_nodes:
            raise InputError(f"{what}: {path()}: more than {max_nodes} values (counting each alias "
                             "as what it stands for)")

    def ended(size: int, key: str | None = None) -> None:
        """A value of `size` values ends in the collection on top of the stack."""
        if stack:
            top = stack[-1]
            top.size += size
            if top.mapping and top.index % 2 == 0:
                top.key = key
            top.index += 1

    loader = loader_type(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.ScalarEvent):
                count(1)
                if event.anchor:
                    sizes[event.anchor] = 1
                value = event.value
                if event.implicit[0] and len(value) > MAX_DIGITS and value.lstrip("+-").isdigit():
                    if not (stack and stack[-1].mapping and stack[-1].index % 2 == 0):
                        raise InputError(f"{what}: {path()}: a number of {len(value)} digits")
                ended(1, value)
            elif isinstance(event, yaml.CollectionStartEvent):
                count(1)
                if len(stack) >= max_depth:
                    raise InputError(f"{what}: {path()}: nested deeper than {max_depth} levels")
                stack.append(_Frame(isinstance(event, yaml.MappingStartEvent), event.anchor))
            elif isinstance(event, yaml.CollectionEndEvent):
                frame = stack.pop()
                if frame.anchor:
                    sizes[frame.anchor] = frame.size
                ended(frame.size)
            elif isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor or "", 1)
                count(size)
                ended(size, "*" + str(event.anchor))
    finally:
        loader.dispose()
