"""Go-style command lines, the same for cri-resmgr, cri-resmgr-agent and cri-resmgr-webhook.

A flag takes one or two dashes, its value after a space or '=': `-policy static`,
`-policy=static`, `--policy static`; a switch stands alone (`-dry-run`). `-h`,
`-help` and `--help` print the flag table and exit 0; `-version` and `--version` print
the program's name and version and exit 0 (when the command has a version). Any usage error is one line,
`PROG: error: MESSAGE` naming the flag as it was typed, and exit code 2.

This module imports only the standard library: the webhook's container image holds
it beside the webhook package and nothing else of cri-resmgr (.importlinter). For the
same reason the log line formats of `-log-format`, one for all four commands, are here.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import platform
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar, cast

__all__ = ["Command", "CommandError", "Flag", "HelpRequested", "UsageError", "Values", "VersionRequested", "choice",
           "integer", "number", "option", "plural", "probe_line", "repeated", "switch", "text"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # what a shell reports for SIGINT
EXIT_BROKEN_PIPE = 141  # what a shell reports for SIGPIPE: `cri-resmgr ... | head` stopped reading
MAX_DIGITS = 100  # an integer flag longer than this is no count, size or seed anyone means
MAX_MESSAGE = 500  # an error line's most characters, the program's name included
HELP_NAMES = ("h", "help")
VERSION_NAME = "version"

T = TypeVar("T")
D = TypeVar("D")
T_co = TypeVar("T_co", covariant=True)


class CommandError(Exception):
    """Ends a command with one line on stderr, `PROG: error: MESSAGE`, and `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CommandError):
    """A bad command line: an unknown flag, a bad value, or a combination the command refuses."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class HelpRequested(Exception):
    pass


class VersionRequested(Exception):
    pass


@dataclass(frozen=True)
class Flag(Generic[T_co]):
    """One flag: `-name METAVAR`, or a switch when metavar is ''."""

    name: str
    metavar: str
    help: str
    default: T_co
    # The texts given for the flag, in order (at least one), to its value; a ValueError
    # says what is wrong with a text. Taking them all keeps T_co covariant, so that one
    # Command holds flags of every type.
    convert: Callable[[Sequence[str]], T_co]
    required: bool = False

    @property
    def is_switch(self) -> bool:
        return not self.metavar


def switch(name: str, help: str) -> Flag[bool]:
    return Flag(name, "", help, False, lambda _texts: True)


def option(name: str, metavar: str, help: str, default: D, parse: Callable[[str], T],
           required: bool = False) -> Flag[T | D]:
    """A flag with a value; given twice, the last one counts (each is checked)."""
    return Flag(name, metavar, help, default, lambda texts: [parse(t) for t in texts][-1], required)


def text(name: str, metavar: str, help: str, default: D, required: bool = False) -> Flag[str | D]:
    return option(name, metavar, help, default, str, required)


def repeated(name: str, metavar: str, help: str) -> Flag[tuple[str, ...]]:
    """A flag that may be given several times; its value is every text, in order."""
    return Flag(name, metavar, help, (), tuple)


def choice(name: str, help: str, choices: Sequence[str], default: str) -> Flag[str]:
    """One of `choices`, in any case; the value is spelled as in `choices`."""
    by_key = {c.lower(): c for c in choices}

    def parse(text: str) -> str:
        if text.lower() not in by_key:
            raise ValueError(f"{shown(text)} is not one of {', '.join(map(repr, choices))}")
        return by_key[text.lower()]

    return option(name, "|".join(choices), help, default, parse)


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if len(text.strip()) > MAX_DIGITS:  # int() would spend time on it, or refuse past 4300 digits
            raise ValueError(f"{shown(text)} has more than {MAX_DIGITS} digits")
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{shown(text)} is not a valid integer") from None
        _check_range(text, value, low, high)
        return value

    return parse


def number(low: float | None = None) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{shown(text)} is not a valid number") from None
        _check_range(text, value, low, None)
        return value

    return parse


def shown(text: str, limit: int = 40) -> str:
    """A value from the command line in a message: quoted, at most about `limit`
    characters (an error line stays one short line whatever was typed)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def clipped(text: str, limit: int = 40) -> str:
    """As `shown`, unquoted when short."""
    return text if len(text) <= limit and text.isprintable() else shown(text, limit)


def _check_range(text: str, value: float, low: float | None, high: float | None) -> None:
    if low is not None and high is not None and not low <= value <= high:
        raise ValueError(f"{clipped(text)} is not in the range {_bound(low)}-{_bound(high)}")
    if low is not None and value < low:
        raise ValueError(f"{clipped(text)} is less than {_bound(low)}, the least it may be")
    if high is not None and value > high:
        raise ValueError(f"{clipped(text)} is more than {_bound(high)}, the most it may be")


def _bound(value: float) -> str:
    """A bound as typed: 0, 100000, 0.001 (never 1e+06)."""
    return str(int(value)) if float(value).is_integer() else str(value)


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 package`, `2 packages`: a count in a message, its noun agreeing (`many`: an
    irregular plural)."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def probe_line(ready: bool, reason: str) -> str:
    """What -probe prints: `ready`, or `ready: WHY` when the answer says more, `not ready: WHY`."""
    if ready:
        return "ready" if reason in ("", "ready") else f"ready: {reason}"
    return f"not ready: {reason}"


class Values:
    """The parsed command line; `values[FLAG]` has FLAG's type."""

    def __init__(self, values: dict[str, object]) -> None:
        self._values = values

    def __getitem__(self, flag: Flag[T]) -> T:
        # Each value came from this flag's own default or convert, so it has the flag's type.
        return cast(T, self._values[flag.name])


@dataclass(frozen=True)
class Command:
    prog: str
    summary: str  # what the command does, shown by -help above the flags
    flags: Sequence[Flag[object]]
    # Printed by -version; the caller passes cri_resmgr.__version__ (this module imports nothing of the project).
    version: str | None = None
    # Old flag names still accepted, to their new ones: the same name across the relay, the NRI
    # plugin, the agent and the webhook for the same thing. Each use prints one deprecation line.
    renamed: Mapping[str, str] = field(default_factory=dict)
    operands: str = ""  # what follows the flags, for the usage line: `[FILE]`

    def run(self, argv: Sequence[str], body: Callable[[Values], int]) -> int:
        """Parses argv and calls body with the values; returns the exit code: body's,
        0 after -help, or a CommandError's after printing its one line."""
        try:
            code = self._run(argv, body)
            sys.stdout.flush()  # here, not at exit: a reader gone away is handled below
            return code
        except BrokenPipeError:  # `cri-resmgr ... | head`: the reader has what it wanted
            _drop_stdout()
            return EXIT_BROKEN_PIPE

    def _run(self, argv: Sequence[str], body: Callable[[Values], int]) -> int:
        try:
            return body(self.parse(argv))
        except HelpRequested:
            print(self.help())
            return 0
        except VersionRequested:
            print(version_line(self.prog, self.version or ""))
            return 0
        except CommandError as err:
            return self.report(err)
        except KeyboardInterrupt:  # before the program's own signal handling is in place
            return EXIT_INTERRUPTED

    def report(self, err: CommandError) -> int:
        """Prints err as the command's one-line error; returns its exit code."""
        message = " ".join(str(err).splitlines())
        room = MAX_MESSAGE - len(self.prog) - len(": error: ")
        if len(message) > room:  # a last guard: the messages clip what they quote themselves
            message = f"{message[:room - 180]} ...({len(message)} characters)... {message[-150:]}"
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        return err.code

    def parse(self, argv: Sequence[str]) -> Values:
        """Raises UsageError for a bad command line, HelpRequested for -h/-help/--help,
        VersionRequested for -version/--version."""
        by_name = {f.name: f for f in self.flags}
        given: dict[str, tuple[str, list[str]]] = {}  # name -> (spelling as typed, texts)
        args = list(argv)
        while args:
            arg = args.pop(0)
            if arg == "--":  # the end of the flags; none of the commands takes other arguments
                if args:
                    raise UsageError(f"unexpected extra argument ({clipped(args[0])})")
                break
            if arg == "-" or not arg.startswith("-"):
                raise UsageError(f"unexpected extra argument ({clipped(arg)})")
            spelling, has_value, value = arg.partition("=")
            flag = self._lookup(spelling, by_name)
            _, texts = given.get(flag.name, (spelling, []))
            texts.append(self._value(flag, spelling, value if has_value else None, args))
            given[flag.name] = (spelling, texts)
        return Values({f.name: self._convert(f, given.get(f.name)) for f in self.flags})

    def _lookup(self, spelling: str, by_name: dict[str, Flag[object]]) -> Flag[object]:
        name = spelling[2:] if spelling.startswith("--") else spelling[1:]
        if name in HELP_NAMES:
            raise HelpRequested
        if name == VERSION_NAME and self.version is not None and VERSION_NAME not in by_name:
            raise VersionRequested
        if name in self.renamed:
            new = self.renamed[name]
            dashes = "--" if spelling.startswith("--") else "-"
            print(f"{self.prog}: warning: {spelling} is deprecated: use {dashes}{new}", file=sys.stderr)
            name = new
        flag = by_name.get(name)
        if flag is None:
            near = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.75) if len(name) <= 100 else []
            dashes = "--" if spelling.startswith("--") else "-"
            raise UsageError(f"no such option: {clipped(spelling)}"
                             + (f" (did you mean {dashes}{near[0]}?)" if near else ""))
        return flag

    @staticmethod
    def _value(flag: Flag[object], spelling: str, inline: str | None, rest: list[str]) -> str:
        """The flag's text: after '=', else the next argument; '' for a switch."""
        if flag.is_switch:
            if inline is not None:
                raise UsageError(f"option {spelling} takes no value")
            return ""
        if inline is not None:
            return inline
        if not rest:
            raise UsageError(f"option {spelling} requires a value")
        return rest.pop(0)

    @staticmethod
    def _convert(flag: Flag[object], given: tuple[str, list[str]] | None) -> object:
        if given is None:
            if flag.required:
                raise UsageError(f"missing option: -{flag.name}")
            return flag.default
        spelling, texts = given
        try:
            return flag.convert(texts)
        except ValueError as err:
            raise UsageError(f"invalid value for {spelling}: {err}") from None

    def help(self) -> str:
        usage = f"usage: {self.prog} [flags]" + (f" {self.operands}" if self.operands else "")
        lines = [usage, "", *textwrap.wrap(self.summary, 100), "",
                 "Flags take one or two dashes, the value after a space or '=':"]
        for flag in self.flags:
            lines.append(f"  -{flag.name}, --{flag.name}" + (f" {flag.metavar}" if flag.metavar else ""))
            # Paths and names stay whole: a reader copies them.
            lines += textwrap.wrap(flag.help + _default_note(flag), 100, initial_indent=" " * 8,
                                   subsequent_indent=" " * 8, break_on_hyphens=False, break_long_words=False)
        if self.version is not None:
            lines += ["  -version, --version", " " * 8 + "Print the version and exit."]
        for old_name, new_name in sorted(self.renamed.items()):
            lines += [f"  -{old_name}", " " * 8 + f"Deprecated: use -{new_name}."]
        lines += ["  -h, -help, --help", " " * 8 + "Show this help and exit."]
        return "\n".join(lines)


def emit(text: str) -> int:
    """Prints text for a command that ends there (help): 0, or 141 if the reader went away."""
    try:
        print(text)
        sys.stdout.flush()
        return 0
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE


def _drop_stdout() -> None:
    """The reader of stdout went away (`| head`): what is still buffered goes nowhere, so that
    the interpreter's last flush at exit raises no second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's StringIO): nothing is left to flush
        pass


def _default_note(flag: Flag[object]) -> str:
    if flag.required:
        return " (required)"
    if flag.default is None or flag.default is False or flag.default in ("", ()):
        return ""
    if isinstance(flag.default, (set, frozenset, list, tuple)):  # not `frozenset()`: words
        return f" (default: {', '.join(sorted(map(str, flag.default))) or 'none'})"
    return f" (default: {flag.default})"


def version_line(prog: str, version: str) -> str:
    """`PROG VERSION (commit C, Python X.Y.Z)`: what a bug report needs to name the build."""
    return f"{prog} {version} (commit {_commit()}, Python {platform.python_version()})"


def _commit() -> str:
    """The source's commit: a COMMIT file beside this module (a build may write one), else
    the git checkout this module runs from (an editable install), else "unknown"."""
    here = Path(__file__).resolve().parent
    try:
        return (here / "COMMIT").read_text().strip() or "unknown"
    except OSError:
        pass
    if not any((d / ".git").exists() for d in (here, *here.parents)):
        return "unknown"
    try:
        done = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


# -log-format: the same flag and line formats for the relay, the NRI plugin, the agent and the webhook.
LOG_FORMATS = ("text", "json")
LOG_LINE = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_format() -> Flag[str]:
    return choice("log-format", "Log lines as text, or as JSON objects with the same fields (time with its zone, "
                  "level, logger, message).", LOG_FORMATS, "text")


class TextLogFormatter(logging.Formatter):
    """LOG_LINE with an ISO 8601 time that says its zone: `2026-11-27T14:47:03.120+00:00`."""

    def __init__(self) -> None:
        super().__init__(LOG_LINE)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return log_time(record)


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line with the text format's fields: time (with its zone), level,
    logger, message; a traceback as `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {"time": log_time(record), "level": record.levelname, "logger": record.name,
                                "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def log_formatter(fmt: str) -> logging.Formatter:
    """The formatter of a -log-format value."""
    return JsonLogFormatter() if fmt == "json" else TextLogFormatter()


def log_time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
