"""Runs the real `cri-resmgr` command as a child process, for tests, demo and bench."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from cri_resmgr.transport import sockets


class RelayProcess:
    def __init__(self, base_dir: Path, runtime_socket: str, args: Sequence[str] = (),
                 name: str = "relay"):
        self.dir = Path(base_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.dir / f"{name}.sock")
        self.config_socket = str(self.dir / f"{name}-config.sock")
        self.state_dir = str(self.dir / f"{name}-state")
        self.log_path = self.dir / f"{name}.log"
        self.runtime_socket = runtime_socket
        self.args = list(args)
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return "unix://" + self.socket

    def command(self) -> list[str]:
        return [sys.executable, "-m", "cri_resmgr.cli",
                "-relay-socket", self.socket, "-runtime-socket", self.runtime_socket,
                "-config-socket", self.config_socket, "-state-dir", self.state_dir, *self.args]

    def start(self, timeout: float = 30.0) -> RelayProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while not sockets.is_live(self.socket):
            if self.proc.poll() is not None:
                raise RuntimeError(f"cri-resmgr exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"cri-resmgr did not serve within {timeout}s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode
        finally:
            self.proc = None

    def kill(self) -> None:
        """kill -9: no chance to clean up, as in a crash."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> RelayProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
