"""What an operator's mistakes and pipes do to the `cri-resmgr` command: one line, never a
traceback (issue 29, item 6)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def command(*args: str) -> list[str]:
    exe = shutil.which("cri-resmgr")
    return [exe, *args] if exe else [sys.executable, "-m", "cri_resmgr.cli", *args]


@pytest.mark.parametrize("flag,value,says", [
    ("-state-dir", "FILE", "state directory {value} cannot be used: exists and is not a directory"),
    ("-state-dir", "/proc/cri-resmgr-x", "state directory {value} cannot be used: no such file or directory"),
    ("-relay-socket", "/proc/nc/relay.sock",
     "relay socket {value}: cannot create its directory /proc/nc: no such file or directory"),
])
def test_an_unusable_path_is_one_error_line_and_exit_1(tmp_path: Path, flag: str, value: str, says: str) -> None:
    if value == "FILE":
        value = str(tmp_path / "a-file")
        Path(value).write_text("")
    args = {"-relay-socket": str(tmp_path / "relay.sock"), "-state-dir": str(tmp_path / "state"),
            "-runtime-socket": str(tmp_path / "no-runtime.sock"), "-runtime-wait-timeout": "1",
            "-config-socket": "-", "-agent-socket": "-", flag: value}
    done = subprocess.run(command(*[a for kv in args.items() for a in kv]), capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and says.format(value=value) in errors[0], done.stderr
    assert not any(line.startswith("cannot read") for line in done.stderr.splitlines()), done.stderr


@pytest.mark.parametrize("args", [
    ["-print-config"],
    ["-h"],
    ["help"],
    ["help", "status"],
    ["topology"],
    ["simulate", "-shape", "4c", "-churn", "20", "-policy", "static"],
])
def test_a_reader_gone_away_ends_the_command_quietly(args: list[str]) -> None:
    """`cri-resmgr -print-config | head -4`: the reader closes the pipe; the command ends as a
    shell's SIGPIPE (141) without a BrokenPipeError traceback. Here the pipe is closed before
    the command writes, so the failure is certain rather than a race."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(command(*args), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == "", done.stderr


def _relay_args(tmp_path: Path, *more: str) -> list[str]:
    return command("-relay-socket", str(tmp_path / "relay.sock"), "-state-dir", str(tmp_path / "state"),
                   "-runtime-socket", str(tmp_path / "no-runtime.sock"), "-config-socket", "-",
                   "-agent-socket", "-", *more)


def test_a_metrics_address_in_use_refuses_to_start(tmp_path: Path) -> None:
    """Issue 29: the relay logged one ERROR and ran on without /healthz, /readyz and /state, while
    `-probe` and `status` talked to whatever held the port. Now it refuses, before waiting for the
    runtime (there is none here: a relay that did not refuse would time out waiting for it)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        done = subprocess.run(_relay_args(tmp_path, "-metrics-address", f"127.0.0.1:{port}",
                                          "-runtime-wait-timeout", "3"),
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    finally:
        holder.close()
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use; refusing to start" in errors[0]
    assert "waiting for the runtime" not in done.stderr
    assert not (tmp_path / "relay.sock").exists()


def test_while_the_runtime_is_awaited_probe_says_so_in_one_line(tmp_path: Path) -> None:
    """The metrics address is served from the start: /readyz is 503 "starting: waiting for the
    runtime" rather than a refused connection, and `-probe` prints that in one plain line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    relay = subprocess.Popen(_relay_args(tmp_path, "-metrics-address", address), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        for _ in range(300):
            probe = subprocess.run(command("-probe", "-metrics-address", address), capture_output=True, text=True,
                                   timeout=60)
            if "not reachable" not in probe.stderr:
                break
            assert relay.poll() is None, relay.communicate()[1]
            time.sleep(0.1)
        assert probe.returncode == 1
        assert probe.stderr == "not ready: starting: waiting for the runtime\n"
        assert probe.stdout == ""
    finally:
        relay.send_signal(signal.SIGTERM)
        _, err = relay.communicate(timeout=60)
    assert relay.returncode == 0, err
    assert "stopped while waiting for the runtime" in err
