"""What an operator expects of the `cri-resmgr` command line (issue 29): subcommands in -help
and `help X`, did-you-mean, a version naming the build, defaults as words, `-probe` where
`status` looks, paths in an option file relative to it, CPU (not PU) in `topology`."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cri_resmgr.cli", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, cwd=cwd)


def test_help_lists_the_subcommands_and_help_x_is_their_help() -> None:
    shown = run("--help")
    assert shown.returncode == 0
    for name in ("topology", "status", "simulate", "replay", "help"):
        assert re.search(rf"^  {name}\s+\S", shown.stdout, re.M), shown.stdout
    assert "-relay-socket" in shown.stdout  # the relay's own flags still follow
    assert run("help", "status").stdout == run("status", "-help").stdout
    bad = run("help", "statsu")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such command: statsu" in bad.stderr


@pytest.mark.parametrize("typed,meant", [("-polcy", "-policy"), ("--relay-sock", "--relay-socket"),
                                         ("-metrics-adress", "-metrics-address")])
def test_a_misspelled_flag_says_what_was_meant(typed: str, meant: str) -> None:
    done = run(typed, "x")
    assert done.returncode == 2
    assert done.stderr == f"cri-resmgr: error: no such option: {typed} (did you mean {meant}?)\n"
    assert "did you mean" not in run("-zzzz").stderr  # nothing close: no guess


def test_a_misspelled_option_in_a_file_says_what_was_meant(tmp_path: Path) -> None:
    opts = tmp_path / "opts"
    opts.write_text("polcy static\n")
    done = run("-config", str(opts))
    assert done.returncode == 2 and "no such option: polcy (did you mean policy?)" in done.stderr


def test_version_names_version_commit_and_python() -> None:
    from cri_resmgr import __version__

    done = run("--version")
    assert done.returncode == 0
    assert re.fullmatch(rf"cri-resmgr {re.escape(__version__)} \(commit (\w{{12}}|unknown), Python "
                        rf"{re.escape('.'.join(map(str, sys.version_info[:3])))}\)\n", done.stdout), done.stdout


def test_defaults_print_as_words() -> None:
    shown = run("-h").stdout
    assert "frozenset" not in shown
    help_text = " ".join(shown.split())
    assert "grpc and asyncio stay at INFO. (default: none)" in help_text


def test_relative_paths_in_an_option_file_are_the_files(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("policy: {Active: static, ReservedResources: {CPU: 1}}\n")
    (tmp_path / "opts").write_text("force-config config.yaml\n")
    done = run("-config", str(tmp_path / "opts"), "-print-config", cwd="/")
    assert done.returncode == 0, done.stderr
    assert f"source: {tmp_path / 'config.yaml'}" in done.stdout


def test_topology_says_cpu_not_pu() -> None:
    shown = run("topology")
    assert shown.returncode == 0, shown.stderr
    assert not re.search(r"\bPU \d", shown.stdout), shown.stdout
    assert re.search(r"\bCPU \d", shown.stdout)


def test_probe_asks_where_status_does_and_says_one_plain_line() -> None:
    """`-probe` with no -metrics-address asks 127.0.0.1:8888, `cri-resmgr status`'s default."""
    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"ready\n" if self.path == "/readyz" else b"not found\n"
            self.send_response(200 if self.path == "/readyz" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    try:
        server = http.server.HTTPServer(("127.0.0.1", 8888), Ready)
    except OSError:
        pytest.skip("127.0.0.1:8888 is in use on this machine")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = run("-probe")
    finally:
        server.shutdown()
        server.server_close()
    assert (done.returncode, done.stdout, done.stderr) == (0, "ready\n", "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_probe_of_nothing_is_one_plain_line() -> None:
    done = run("-probe", "-metrics-address", f"127.0.0.1:{_free_port()}")
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("not ready: relay not reachable at 127.0.0.1:")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_carry_a_zoned_time_and_json_has_the_same_fields(tmp_path: Path, fmt: str) -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-m", "cri_resmgr.cli", "-log-format", fmt, "-relay-socket", str(tmp_path / "r.sock"),
         "-state-dir", str(tmp_path / "state"), "-runtime-socket", str(tmp_path / "none.sock"),
         "-runtime-wait-timeout", "1", "-config-socket", "-", "-agent-socket", "-"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    zoned = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d"
    if fmt == "text":
        assert re.fullmatch(zoned + r" INFO cri_resmgr\.app: cri-resmgr \S+ starting", lines[0]), lines[0]
        return
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert records[0]["message"].startswith("cri-resmgr ") and records[0]["level"] == "INFO"
    assert all(set(r) == {"time", "level", "logger", "message"} for r in records), records
    assert all(re.fullmatch(zoned, r["time"]) for r in records)
    assert records[-1]["level"] == "ERROR" and "not ready after 1s" in records[-1]["message"]
