"""The shipped systemd unit (scripts/node/cri-resmgr.service), run the way systemd runs it:
its ExecStart line, with /etc/default/cri-resmgr's variables expanded, against the tests'
throwaway containerd, with a fake NOTIFY_SOCKET standing in for systemd."""

from __future__ import annotations

import configparser
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc

from cri_resmgr import __version__
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr._proto import runtime_v1_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "scripts" / "node"
# Where install-node.sh puts the files the unit names, and what stands for them here.
INSTALLED = {"/usr/local/bin/cri-resmgr": str(Path(sys.executable).parent / "cri-resmgr"),
             "/etc/cri-resmgr/fallback.yaml": str(NODE / "fallback.yaml")}


def load_unit() -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    unit.read(NODE / "cri-resmgr.service")
    return unit


def environment_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile=: KEY=VALUE lines, '#' and ';' comments, one level of quotes."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def exec_start_argv(line: str, env: dict[str, str]) -> list[str]:
    """systemd's expansion: a word that is just $VAR becomes VAR's words, ${VAR} stays one word."""
    argv: list[str] = []
    for word in shlex.split(line):
        whole = re.fullmatch(r"\$(\w+)", word)
        if whole:
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv


def test_unit_orders_the_relay_between_containerd_and_kubelet():
    unit = load_unit()
    assert unit["Service"]["Type"] == "notify"
    assert "kubelet.service" in unit["Unit"]["Before"].split()
    assert "containerd.service" in unit["Unit"]["After"].split()
    assert unit["Service"]["EnvironmentFile"] == "-/etc/default/cri-resmgr"
    assert unit["Service"]["Restart"] == "always"
    assert "multi-user.target" in unit["Install"]["WantedBy"].split()
    # Every absolute path the command line names is a file install-node.sh installs.
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert {w for w in argv if w.startswith("/")} == set(INSTALLED)


def test_sample_files_configure_a_relay_that_starts():
    """The shipped /etc/default options and fallback configuration pass the relay's own checks."""
    env = environment_file(NODE / "cri-resmgr.default")
    argv = exec_start_argv(load_unit()["Service"]["ExecStart"], env)
    argv = [INSTALLED.get(w, w) for w in argv]
    shown = subprocess.run([*argv, "-print-config"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "source: " + INSTALLED["/etc/cri-resmgr/fallback.yaml"] in shown.stdout


class FakeSystemd:
    """The notification socket, in the abstract namespace as systemd's own usually is."""

    def __init__(self) -> None:
        self.name = f"@crirm-notify-{secrets.token_hex(6)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name[1:])

    def receive(self, timeout: float) -> list[str] | None:
        """The next message's lines, or None when none came in time."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(4096).decode().split("\n")
        except TimeoutError:
            return None

    def close(self) -> None:
        self.sock.close()


def version_via(relay_socket: str) -> str:
    with grpc.insecure_channel("unix://" + relay_socket) as channel:
        reply = pb_grpc.RuntimeServiceStub(channel).Version(pb.VersionRequest(version="v1"), timeout=5)
    return reply.runtime_name


def test_exec_start_notifies_ready_once_serving_and_stopping_on_sigterm(containerd, sockdir):
    env = environment_file(NODE / "cri-resmgr.default")
    # The runtime socket appears only later: READY=1 must wait for it.
    runtime = Path(sockdir) / "runtime.sock"
    relay_socket = f"{sockdir}/relay.sock"
    env["CRI_RESMGR_OPTIONS"] += (f" -relay-socket {relay_socket} -runtime-socket {runtime}"
                                  f" -config-socket {sockdir}/config.sock -state-dir {sockdir}/state")
    argv = [INSTALLED.get(w, w) for w in exec_start_argv(load_unit()["Service"]["ExecStart"], env)]
    systemd = FakeSystemd()
    log_path = Path(sockdir) / "relay.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env={"PATH": os.environ.get("PATH", ""), "NOTIFY_SOCKET": systemd.name})
    try:
        assert systemd.receive(timeout=2.0) is None, "READY before the runtime exists"
        assert proc.poll() is None, log_path.read_text()
        os.symlink(containerd.socket, runtime)
        message = systemd.receive(timeout=30.0)
        assert message is not None and "READY=1" in message, log_path.read_text()
        # At READY=1 the relay already serves: kubelet, started next, gets answers.
        assert version_via(relay_socket) == "containerd"
        proc.send_signal(signal.SIGTERM)
        assert systemd.receive(timeout=10.0) == ["STOPPING=1"]
        assert proc.wait(timeout=20) == 0
        assert not os.path.exists(relay_socket)
        first = log_path.read_text().splitlines()[0]
        assert f"cri-resmgr {__version__} starting" in first
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        systemd.close()


def test_no_notification_socket_no_notification(containerd, sockdir):
    """Started by hand (no NOTIFY_SOCKET), the relay serves as before."""
    env = {"CRI_RESMGR_OPTIONS": f"-relay-socket {sockdir}/r.sock -runtime-socket {containerd.socket} "
                                 f"-config-socket - -state-dir {sockdir}/state"}
    argv = [INSTALLED.get(w, w) for w in exec_start_argv(load_unit()["Service"]["ExecStart"], env)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={"PATH": os.environ.get("PATH", "")})
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(f"{sockdir}/r.sock") and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert version_via(f"{sockdir}/r.sock") == "containerd"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
