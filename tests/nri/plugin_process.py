"""Runs the real `cri-resmgr-nri` command as a child process, for tests and bench."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"


class PluginProcess:
    def __init__(self, base_dir: Path, nri_socket: str, host_root: str, config: str | None = STATIC,
                 args: Sequence[str] = (), name: str = "plugin"):
        """`config`: the -force-config file's text; None: no -force-config."""
        self.dir = Path(base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nri_socket = nri_socket
        self.state_dir = str(self.dir / "state")
        self.log_path = self.dir / f"{name}.log"
        self.config_path = self.dir / f"{name}.yaml"
        self.forced = config is not None
        if config is not None:
            self.config_path.write_text(config)
        self.host_root = host_root
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """With -force-config unless `args` name a -config-socket (the agent's configuration
        then) or there is none; without the Config service unless `args` name its socket."""
        config = [] if "-config-socket" in self.args else [
            *(["-force-config", str(self.config_path)] if self.forced else []), "-config-socket", "-"]
        return [sys.executable, "-m", "cri_resmgr.nri.cli", "-nri-socket", self.nri_socket,
                "-state-dir", self.state_dir, "-host-root", self.host_root, *config,
                "-reconcile-period", "0", *self.args]

    def start(self, env: dict[str, str] | None = None, pass_fds: Sequence[int] = ()) -> PluginProcess:
        """Started with NRI_* variables from `env` only (a runtime that launches the plugin sets them)."""
        full = {k: v for k, v in os.environ.items() if not k.startswith("NRI_")} | (env or {})
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=full,
                                         pass_fds=tuple(pass_fds))
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode
