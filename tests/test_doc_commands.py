"""The docs' command lines are true: every cri-resmgr, cri-resmgr-nri, cri-resmgr-agent and
cri-resmgr-webhook command line README.md and docs/*.md give (code blocks and inline code)
has flags and subcommands its program's own parser takes, and every single-dash flag the
prose names is one of theirs (tests/harness/doc_commands.py). Nothing is run: the parse alone
is asked, so a command that would need a runtime is judged by its flags."""

from __future__ import annotations

import re
from pathlib import Path

from cri_resmgr.frontend import logsetup
from tests.harness import doc_commands

REPO = Path(__file__).resolve().parents[1]

# Single-dash flags the docs name that are other programs' (each said where), not ours.
OTHERS_FLAGS = {
    "snapshot": "docs/vm.md: qemu-system-x86_64's",
    "name": "docs/dump.md: a dumped command's own argument (`-name=X`), whose value is masked",
}


def test_every_documented_command_line_is_taken_by_its_program():
    commands = [c for f in doc_commands.doc_files(REPO) for c in doc_commands.commands_in(f)]
    assert len(commands) > 50  # the extraction finds the docs' commands at all
    refused = [str(r) for c in commands if (r := doc_commands.refusal(c))]
    assert not refused, "\n".join(refused)


def test_every_flag_the_prose_names_is_a_flag_of_ours():
    names = doc_commands.all_flag_names()
    unknown = [f"{f.relative_to(REPO)}:{n}: no such flag: -{name} (in `{span}`)"
               for f in doc_commands.doc_files(REPO) for n, span, name in doc_commands.flag_spans(f)
               if name not in names and name not in OTHERS_FLAGS]
    assert not unknown, "\n".join(unknown)


def test_the_checker_names_the_file_line_and_refused_flag(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("Ask it: `cri-resmgr status -metrics-address HOST:PORT`.\n\n"
                   "```sh\n"
                   "NODE_NAME=n1 cri-resmgr -policy static \\\n"
                   "    -relay-sockt /tmp/r.sock | tee log\n"
                   "cri-resmgr simulat -shape 2s\n"
                   "cri-resmgr simulate -churn many\n"
                   "cri-resmgr topology -o text|yaml\n"
                   "cri-resmgr-agent -probe extra\n"
                   "cri-resmgr status -o svg node.svg   # fine: FILE is its operand\n"
                   "cri-resmgr-webhook -cert-file tls.crt -key-file tls.key [-port 8443]\n"
                   "```\n\n"
                   "```\n$ cri-resmgr -help\nCONTAINER   cri-resmgr -bogus is output here, not a command\n```\n"
                   "The counts: `-dump-count-perod`.\n")
    refused = [str(r) for c in doc_commands.commands_in(doc) if (r := doc_commands.refusal(c))]
    assert refused == [
        f"{doc}:1: cri-resmgr status: no such option: -metrics-address: cri-resmgr status -metrics-address HOST:PORT",
        f"{doc}:4: cri-resmgr: no such option: -relay-sockt (did you mean -relay-socket?): "
        "NODE_NAME=n1 cri-resmgr -policy static  -relay-sockt /tmp/r.sock | tee log",
        f"{doc}:6: cri-resmgr: no such command: simulat (commands: topology, status, simulate, replay, help): "
        "cri-resmgr simulat -shape 2s",
        f"{doc}:7: cri-resmgr simulate: invalid value for -churn: 'many' is not a valid integer: "
        "cri-resmgr simulate -churn many",
        f"{doc}:8: cri-resmgr topology: invalid value for -o: 'yaml' is not one of 'text', 'json': "
        "cri-resmgr topology -o text|yaml",
        f"{doc}:9: cri-resmgr-agent: unexpected extra argument (extra): cri-resmgr-agent -probe extra",
    ]
    assert [(n, name) for n, _, name in doc_commands.flag_spans(doc)] == [(18, "dump-count-perod")]


def test_readme_names_every_logger_debug_source():
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| `-logger-debug"))
    named = set(re.findall(r"`([a-z-]+)`", row.split("comma-separated:", 1)[1]))
    assert named == set(logsetup.SOURCES), f"README's -logger-debug sources differ from -help's: " \
        f"missing {sorted(set(logsetup.SOURCES) - named)}, extra {sorted(named - set(logsetup.SOURCES))}"


def test_readme_status_example_has_the_stamp_line_status_prints():
    text = (REPO / "README.md").read_text()
    example = text.split("$ cri-resmgr status -address 127.0.0.1:8888\n", 1)[1].splitlines()
    # text.py: the policy line, then `(node N, YYYY-MM-DD HH:MM:SS UTC, cri-resmgr VERSION)`
    assert re.fullmatch(r"\(node \S+, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, cri-resmgr \S+\)", example[1]), example[:3]


def test_readme_states_no_test_count_that_rots():
    counts = re.findall(r"[\d,]{3,} tests", (REPO / "README.md").read_text())
    assert not counts, f"README gives a number of tests, which changes with every landing: {counts}"


def test_the_systemd_units_link_to_this_projects_docs():
    for unit in sorted((REPO / "scripts" / "node").glob("*.service")):
        links = [line for line in unit.read_text().splitlines() if line.startswith("Documentation=")]
        assert links, unit
        for link in links:
            assert "intel/cri-resource-manager" not in link, f"{unit.name}: {link}: the original project, not ours"
