"""Logging set-up: INFO for everything, DEBUG for the sources `-logger-debug` names.

`-logger-debug` takes the original CRI-RM form: `'*'` (all of ours) or a comma-separated
list of sources (`policy,cache,relay`). Debug is turned on for our loggers only
(`cri_resmgr...`), never the root logger, so grpc's and asyncio's debug lines stay off.
A configuration's `logger.Debug: true` adds all of ours while it is in force.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from cri_resmgr import flags

ROOT = "cri_resmgr"
ALL = "*"
# Source names (the original's and the layers of docs/architecture.md) to our loggers.
SOURCES: dict[str, tuple[str, ...]] = {
    "relay": ("cri_resmgr.transport",),
    "transport": ("cri_resmgr.transport",),
    "engine": ("cri_resmgr.engine",),
    "resource-manager": ("cri_resmgr.engine.resmgr", "cri_resmgr.engine.controller"),
    "resmgr": ("cri_resmgr.engine.resmgr", "cri_resmgr.engine.controller"),
    "cache": ("cri_resmgr.engine.cache", "cri_resmgr.engine.adopt"),
    "enforce": ("cri_resmgr.engine.enforce",),
    "policy": ("cri_resmgr.policy",),
    "config": ("cri_resmgr.config", "cri_resmgr.agent_client"),
    "agent": ("cri_resmgr.agent_client", "cri_resmgr.nodeexport"),
    "dump": ("cri_resmgr.dump",),
    "topology": ("cri_resmgr.topology",),
    "sysfs": ("cri_resmgr.topology",),
    "metrics": ("cri_resmgr.metrics", "cri_resmgr.health"),
    "app": ("cri_resmgr.app",),
}
FORMAT = flags.LOG_LINE


def parse_sources(text: str) -> frozenset[str]:
    """`'*'` or `a,b,c`; raises ValueError naming an unknown source."""
    names = frozenset(n.strip().lower() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError("expected '*' or a comma-separated list of sources")
    unknown = sorted(names - SOURCES.keys() - {ALL})
    if unknown:
        raise ValueError(f"unknown log source {', '.join(unknown)} (known: {ALL}, {', '.join(sorted(SOURCES))})")
    return names


def _loggers(sources: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for s in sources:
        out.update((ROOT,) if s == ALL else SOURCES[s])
    return out


class DebugSources:
    """Which of our loggers log at DEBUG: the command line's, plus all of ours while the
    configuration in force says `logger.Debug: true`."""

    def __init__(self, sources: frozenset[str]) -> None:
        self._flag = _loggers(sources)
        self._on: set[str] = set()
        self.set_config_debug(False)

    def set_config_debug(self, debug: bool) -> None:
        wanted = self._flag | ({ROOT} if debug else set())
        for name in self._on - wanted:
            logging.getLogger(name).setLevel(logging.NOTSET)
        for name in wanted:
            logging.getLogger(name).setLevel(logging.DEBUG)
        self._on = wanted


class Throttle(logging.Filter):
    """Repeated warnings and errors at a bounded rate: a client that sends bad requests
    as fast as it can, or a node full of pods with a bad annotation, must not fill
    the disk with the same line (43,605 lines in 17 s, before). Of the lines of one
    kind (logger, level and format, or the text's start when the format is only
    "%s"), `burst` pass per `interval` seconds; the next one to pass after some were
    dropped says how many. A line is also cut to `longest` characters: whatever its
    values, a log line stays a line. A line an operator asked for (a rejected SIGHUP or
    push) is logged with `extra=UNTHROTTLED` and always passes."""

    def __init__(self, burst: int = 10, interval: float = 10.0, longest: int = 2000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.interval, self.longest, self._clock = burst, interval, longest, clock
        self._kinds: dict[tuple[str, int, str], list[float]] = {}  # kind -> [window start, passed, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > self.longest:
            message = f"{message[:self.longest]}... ({len(message)} characters)"
        if record.levelno < logging.WARNING or getattr(record, "unthrottled", False):
            self._set(record, message)
            return True
        fmt = record.msg if isinstance(record.msg, str) else ""
        kind = (record.name, record.levelno, fmt if fmt.replace("%s", "").strip(" :;,.") else message[:48])
        now = self._clock()
        state = self._kinds.get(kind)
        if state is None or now - state[0] >= self.interval:
            dropped = int(state[2]) if state is not None else 0
            if len(self._kinds) >= 1000:  # kinds seen once long ago are forgotten
                self._kinds = {k: v for k, v in self._kinds.items() if now - v[0] < self.interval}
            self._kinds[kind] = [now, 1, 0]
            if dropped:
                message += f" [{dropped} similar line{'s' if dropped != 1 else ''} suppressed]"
            self._set(record, message)
            return True
        if state[1] < self.burst:
            state[1] += 1
            self._set(record, message)
            return True
        state[2] += 1
        return False

    @staticmethod
    def _set(record: logging.LogRecord, message: str) -> None:
        record.msg, record.args = message, None


# The line formats live with the flag parser, which the webhook's image carries alone.
FORMATS = flags.LOG_FORMATS
TextFormatter = flags.TextLogFormatter
JsonFormatter = flags.JsonLogFormatter


def setup(sources: frozenset[str], fmt: str = "text") -> DebugSources:
    """INFO on the root logger (so grpc, asyncio and the rest stay quiet), DEBUG for `sources`;
    repeated warnings rate-limited and every line bounded (`Throttle`). `fmt`: "text" lines,
    or "json" lines (-log-format)."""
    logging.basicConfig(level=logging.INFO, format=FORMAT)
    formatter = flags.log_formatter(fmt)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
    throttle = Throttle()
    for handler in logging.getLogger().handlers:
        handler.addFilter(throttle)
    return DebugSources(sources)


def debug_flag_value(argv: list[str], name: str) -> list[str]:
    """A bare `-logger-debug` (no value, as the switch it used to be) means `'*'`: it is
    followed by nothing or by another flag. Rewritten before parsing, since the flag
    parser's options always take a value."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg in (f"-{name}", f"--{name}") and (i + 1 == len(argv) or argv[i + 1].startswith("-")):
            out[-1] = f"{arg}={ALL}"
    return out
