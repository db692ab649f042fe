"""The dump rule language: which CRI methods to dump, and how much of them.

A spec is a comma-separated list of items, read left to right:

    reset            forget every rule given so far
    LEVEL:PATTERN    dump methods matching PATTERN at LEVEL (LEVEL becomes current)
    PATTERN          dump methods matching PATTERN at the current level
                     (``full`` before any level was named)

A PATTERN is an exact method name (``CreateContainer``), an exact gRPC path
(``/runtime.v1.RuntimeService/ListContainers``), or else a regular expression
that must match the whole short name or the whole path.  An exact rule beats any
regular expression whatever their order; among regular expressions the last
matching one wins; a method nothing matches is not dumped.  docs/dump.md is the
user-facing description; keep the two in step.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from cri_resmgr.bounded import short
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.transport.methods import split_path


class Level(enum.Enum):
    OFF = "off"
    NAME = "name"
    FULL = "full"
    COUNT = "count"


# Spelling -> level.  Synonyms exist because users of the Go cri-resmgr typed these.
LEVEL_NAMES: dict[str, Level] = {
    "off": Level.OFF,
    "suppress": Level.OFF,
    "name": Level.NAME,
    "short": Level.NAME,
    "full": Level.FULL,
    "verbose": Level.FULL,
    "count": Level.COUNT,
}

# The level a bare pattern gets before any LEVEL: was written ("-dump CreateContainer").
DEFAULT_BARE_LEVEL = Level.FULL
RESET = "reset"

_EXACT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A literal gRPC path: its dots are meant literally, so it is an exact rule too.
_EXACT_PATH = re.compile(r"/[A-Za-z0-9_.]+/[A-Za-z_][A-Za-z0-9_]*")
# What may precede the first ':' when the item is meant as LEVEL:PATTERN.  Anything
# else (e.g. "(?:List|Stop).*") is a bare regular expression that contains a colon.
_LEVEL_WORD = re.compile(r"[A-Za-z]+")


class DumpSpecError(CriResmgrError, ValueError):
    """A dump spec that cannot be parsed; the message names the offending item."""


@dataclass(frozen=True)
class Rule:
    level: Level
    pattern: str
    regexp: re.Pattern[str] | None  # None for exact rules

    def matches(self, path: str, name: str) -> bool:
        if self.regexp is None:
            return self.pattern in (name, path)
        return self.regexp.fullmatch(name) is not None or self.regexp.fullmatch(path) is not None


class Rules:
    """A parsed, immutable rule set; level() answers once per path and caches it."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._exact: dict[str, Level] = {}
        self._regexps: list[Rule] = []
        for rule in rules:
            if rule.regexp is None:
                self._exact[rule.pattern] = rule.level  # a later exact rule overrides
            else:
                self._regexps.append(rule)
        self._cache: dict[str, Level] = {}
        self.evaluations = 0  # how many paths were actually matched (not served from cache)

    def level(self, path: str) -> Level:
        level = self._cache.get(path)
        if level is None:
            level = self._cache[path] = self.match(path)
        return level

    def match(self, path: str) -> Level:
        """Uncached decision for one gRPC path (or a bare method name)."""
        self.evaluations += 1
        _, name = split_path(path)
        # The full path is more specific than the short name, so it is asked first.
        for key in (path, name):
            if key in self._exact:
                return self._exact[key]
        for rule in reversed(self._regexps):
            if rule.matches(path, name):
                return rule.level
        return Level.OFF

    @property
    def empty(self) -> bool:
        return not self._exact and not self._regexps

    def describe(self) -> list[str]:
        """The effective rules, exact first, for logs and `--help`-style output."""
        exact = [f"{lv.value}:{p}" for p, lv in self._exact.items()]
        return exact + [f"{r.level.value}:{r.pattern}" for r in self._regexps]


def parse_specs(specs: Iterable[str]) -> Rules:
    """Parse several -dump values as one spec, joined in order."""
    if isinstance(specs, str):  # one spec passed bare: don't iterate its characters
        specs = [specs]
    rules: list[Rule] = []
    current: Level | None = None
    for spec in specs:
        for raw in spec.split(","):
            item = raw.strip()
            if not item:
                raise DumpSpecError(f"empty item in dump spec {short(spec)}")
            if item.lower() == RESET:
                rules.clear()
                continue
            level, pattern = _split_item(item, spec)
            if level is None:
                level = current if current is not None else DEFAULT_BARE_LEVEL
            else:
                current = level
            rules.append(_make_rule(level, pattern, item))
    return Rules(rules)


def _split_item(item: str, spec: str) -> tuple[Level | None, str]:
    head, colon, tail = item.partition(":")
    head = head.strip()
    if colon and _LEVEL_WORD.fullmatch(head):
        level = LEVEL_NAMES.get(head.lower())
        if level is None:
            known = ", ".join(LEVEL_NAMES)
            raise DumpSpecError(f"unknown dump level {short(head)} in {short(item)} (known: {known})")
        pattern = tail.strip()
        if not pattern:
            raise DumpSpecError(f"empty pattern in dump rule {short(item)}")
        return level, pattern
    if item.lower() in LEVEL_NAMES:
        raise DumpSpecError(f"dump level {short(item)} without a pattern (write e.g. {item}:.*)")
    return None, item


def _make_rule(level: Level, pattern: str, item: str) -> Rule:
    if _EXACT_NAME.fullmatch(pattern) or _EXACT_PATH.fullmatch(pattern):
        return Rule(level, pattern, None)
    try:
        regexp = re.compile(pattern)
    except re.error as err:
        raise DumpSpecError(f"invalid regular expression {short(pattern)} in dump rule {short(item)}: {err}") from None
    return Rule(level, pattern, regexp)
