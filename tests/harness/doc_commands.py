"""The command lines README.md and docs/*.md give for our programs, and what each program's
own parser (cri_resmgr/flags.py) says of their flags: tests/test_doc_commands.py keeps the
docs true with it.

A command line is a shell line of a code block (after `$ ` in a block with prompts, else every
line; `\\` continuations joined) or an inline code span, one segment of it (split at ` | `,
`&&`, `;`, `>`; `a|b` without spaces is a choice) whose first word, after `VAR=value` and
`sudo`, is one of the programs. Nothing is run: each flag is looked up in the command's flag table as the parser does (renamed ones
too), a value is taken when the flag takes one and converted by the flag's own converter;
a placeholder the docs write for a value (`HOST:PORT`, `N`, `DIR|TARBALL`) is not converted,
and `a|b` stands for each of a and b. `[`, `]` and `...` are the synopsis' brackets and
ellipses.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cri_resmgr import flags

PROGRAMS = ("cri-resmgr", "cri-resmgr-nri", "cri-resmgr-agent", "cri-resmgr-webhook")
SHELL_BLOCKS = ("", "sh", "shell", "bash", "console")
PLACEHOLDER = re.compile(r"\$.*|[A-Z][A-Z0-9_]*(?:[:./-][A-Za-z0-9_]+)*|<[^>]+>|\.\.\.")
VERSION_OUTPUT = re.compile(r"\d+\.\d+")  # `cri-resmgr 0.1.0 (commit ...)`: what -version prints


@dataclass(frozen=True)
class DocCommand:
    file: Path
    line: int
    text: str  # the command as the doc gives it
    words: tuple[str, ...]  # program first


@dataclass(frozen=True)
class Refusal:
    command: DocCommand
    reason: str

    def __str__(self) -> str:
        return f"{self.command.file}:{self.command.line}: {self.reason}: {self.command.text}"


def commands_in(path: Path) -> Iterator[DocCommand]:
    lines = path.read_text().splitlines()
    fence: str | None = None  # the open block's language, None outside blocks
    prompts = False
    pending: tuple[int, str] | None = None  # a line ending in `\`, and its number
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence = stripped[3:].strip().lower()
                prompts = _block_has_prompts(lines, number)
            else:
                fence = None
            pending = None
            continue
        if fence is None:
            for span in re.findall(r"`([^`]+)`", line):
                yield from _segments(path, number, span)
            continue
        if fence not in SHELL_BLOCKS:
            continue
        start, text = pending if pending else (number, "")
        text += " " + stripped
        if text.endswith("\\"):
            pending = (start, text[:-1])
            continue
        pending = None
        text = text.strip()
        if prompts:
            if not text.startswith("$ "):
                continue
            text = text[2:]
        yield from _segments(path, start, text)


def _block_has_prompts(lines: list[str], opening: int) -> bool:
    for line in lines[opening:]:
        if line.strip().startswith("```"):
            return False
        if line.startswith("$ "):
            return True
    return False


def _segments(path: Path, number: int, text: str) -> Iterator[DocCommand]:
    # `text|json` (no spaces) is a synopsis' choice, not a pipe: kept whole through the lexer.
    protected = re.sub(r"(?<=\S)\|(?=\S)", "\x01", text)
    try:
        lexer = shlex.shlex(protected, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = [w.replace("\x01", "|") for w in lexer]
    except ValueError:  # an unclosed quote: not shell
        return
    segment: list[str] = []
    for word in [*words, ";"]:
        if word and set(word) <= set("|&;<>"):
            yield from _command(path, number, text, segment)
            segment = []
            if word in (">", ">>", "<", "2>"):
                segment = ["\0redirected"]  # the next word is a file, not a command
        else:
            segment.append(word)


def _command(path: Path, number: int, text: str, words: list[str]) -> Iterator[DocCommand]:
    while words and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]) or words[0] == "sudo"):
        words = words[1:]
    # The program by name, or installed (`/usr/local/bin/cri-resmgr`); not a path that only
    # ends in its name (`/var/lib/cri-resmgr`).
    program = Path(words[0]).name if words and (words[0] in PROGRAMS or "/bin/" in words[0]) else ""
    if program not in PROGRAMS:
        return
    yield DocCommand(path, number, text.strip(), (program, *words[1:]))


def refusal(command: DocCommand) -> Refusal | None:
    """Why the program's parser refuses the command's flags or subcommand, or None."""
    words = [w.strip("[]") for w in command.words[1:]]
    words = [w for w in words if w and w != "..."]
    if words and VERSION_OUTPUT.match(words[0]):
        return None
    parser, operands, words = _parser(command.words[0], words)
    if isinstance(parser, str):
        return Refusal(command, parser)
    try:
        _check(parser, operands, words)
    except flags.UsageError as err:
        return Refusal(command, f"{parser.prog}: {err}")
    return None


def _parser(program: str, words: list[str]) -> tuple[flags.Command | str, int, list[str]]:
    """The parser of the program (or of its subcommand), how many operands it takes, and the
    words left for it; or why there is none."""
    if program == "cri-resmgr-nri":
        from cri_resmgr.nri import cli as nri

        return nri.COMMAND, 0, words
    if program == "cri-resmgr-agent":
        from cri_resmgr_agent import cli as agent

        return agent.COMMAND, 0, words
    if program == "cri-resmgr-webhook":
        from cri_resmgr_webhook import cli as webhook

        return webhook.COMMAND, 0, words
    from cri_resmgr.relay import cli as relay

    if not words or words[0].startswith("-"):
        return relay.COMMAND, 0, words
    sub, rest = words[0], words[1:]
    names = [name for name, _ in relay.SUBCOMMANDS]
    if sub not in names and not PLACEHOLDER.fullmatch(sub):  # `cri-resmgr VERSION starting`: a log line
        return f"cri-resmgr: no such command: {sub} (commands: {', '.join(names)})", 0, rest
    if sub not in names:
        return relay.COMMAND, 0, []
    if sub == "help":
        if rest and rest[0] not in names and not PLACEHOLDER.fullmatch(rest[0]):
            return f"cri-resmgr help: no such command: {rest[0]}", 0, rest
        return relay.COMMAND, 0, [w for w in rest[1:]]
    if sub == "topology":
        return relay.TOPOLOGY, 0, rest
    if sub == "status":
        from cri_resmgr.status import command as status

        return status.COMMAND, 1, rest
    if sub == "simulate":
        from cri_resmgr.simulate import command as simulate

        return simulate.COMMAND, 0, rest
    from cri_resmgr.simulate import replay_command as replay

    return replay.COMMAND, 1, rest


def _check(parser: flags.Command, operands: int, words: Sequence[str]) -> None:
    by_name = {f.name: f for f in parser.flags}
    rest = list(words)
    while rest:
        word = rest.pop(0)
        if word == "-" or not word.startswith("-") or PLACEHOLDER.fullmatch(word):
            if operands <= 0 and not PLACEHOLDER.fullmatch(word):
                raise flags.UsageError(f"unexpected extra argument ({word})")
            operands -= 1
            continue
        spelling, has_value, value = word.partition("=")
        try:
            flag = parser._lookup(spelling, by_name)
        except (flags.HelpRequested, flags.VersionRequested):
            continue
        text = parser._value(flag, spelling, value if has_value else None, rest)
        if flag.is_switch:
            continue
        for alternative in text.split("|") if "|" in text and not PLACEHOLDER.fullmatch(text) else [text]:
            if PLACEHOLDER.fullmatch(alternative):
                continue
            try:
                flag.convert([alternative])
            except ValueError as err:
                raise flags.UsageError(f"invalid value for {spelling}: {err}") from None


def flag_spans(path: Path) -> Iterator[tuple[int, str, str]]:
    """Each inline code span of prose that starts with a single-dash flag (`-dump-max-size`,
    `-o json`): its line, the span and the flag's name. Two dashes are other programs'
    (kubelet's, pytest's, the install script's); ours take one in the docs."""
    fence = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for span in re.findall(r"`(-[^`]+)`", line):
            found = re.match(r"-([a-z][a-z0-9-]*)(?=$|[ =])", span)
            if found:
                yield number, span, found.group(1)


def all_flag_names() -> set[str]:
    """Every flag of every program and subcommand, renamed ones and -help, -version too."""
    from cri_resmgr.nri import cli as nri
    from cri_resmgr.relay import cli as relay
    from cri_resmgr.simulate import command as simulate
    from cri_resmgr.simulate import replay_command as replay
    from cri_resmgr.status import command as status
    from cri_resmgr_agent import cli as agent
    from cri_resmgr_webhook import cli as webhook

    names = {*flags.HELP_NAMES, flags.VERSION_NAME}
    for command in (relay.COMMAND, relay.TOPOLOGY, status.COMMAND, simulate.COMMAND, replay.COMMAND, nri.COMMAND,
                    agent.COMMAND, webhook.COMMAND):
        names |= {f.name for f in command.flags} | set(command.renamed)
    return names


def doc_files(repo: Path) -> list[Path]:
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]
