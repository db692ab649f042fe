"""Drives the Go program (`nri-interop`, built by gobuild.py) as a child process:
JSON commands to its stdin, its JSON lines read back on a thread."""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)
WAIT = 60.0  # generous: the machine is shared and slow; nothing here is timed


@dataclass
class Answer:
    code: int
    message: str
    json: str
    raw: bytes

    def decode(self, kind: type[M]) -> M:
        assert self.code == 0, f"call failed: {self.code} {self.message}"
        return json_format.Parse(self.json or "{}", kind())


class GoPeer:
    def __init__(self, binary: Path, args: list[str], log_path: Path):
        """`args`: e.g. ["-mode", "runtime", "-socket", PATH] (main.go says which)."""
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([str(binary), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log)
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._answers: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._next_id = 1
        self.seen: list[dict[str, Any]] = []  # every event, in order
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            out = json.loads(line)
            if out.get("id"):
                with self._lock:
                    q = self._answers.setdefault(out["id"], queue.Queue())
                q.put(out)
            else:
                self.seen.append(out)
                self._events.put(out)
        self._events.put({"event": "exited"})

    def event(self, name: str, timeout: float = WAIT) -> dict[str, Any]:
        """The next event called `name` (others before it are skipped, kept in `seen`)."""
        while True:
            ev = self._events.get(timeout=timeout)
            if ev["event"] == name:
                return ev
            if ev["event"] == "exited":
                raise AssertionError(f"nri-interop exited while waiting for {name}")

    def send(self, cmd: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            cmd["id"] = self._next_id
            self._next_id += 1
            q = self._answers.setdefault(cmd["id"], queue.Queue())
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.proc.stdin.flush()
        return q.get(timeout=WAIT)

    def call(self, service: str, method: str, request: Message | None = None, reply: type[Message] | None = None,
             raw: bytes | None = None, raw_size: int = 0, timeout_ms: int = 20_000) -> Answer:
        cmd: dict[str, Any] = {"op": "call", "service": service, "method": method, "timeout_ms": timeout_ms}
        if request is not None:
            cmd["type"] = request.DESCRIPTOR.full_name
            cmd["json"] = json_format.MessageToJson(request)
        elif raw is not None:
            cmd["raw"] = base64.b64encode(raw).decode()
        cmd["raw_size"] = raw_size
        if reply is not None:
            cmd["reply"] = reply.DESCRIPTOR.full_name
        out = self.send(cmd)
        return Answer(out.get("code", 0), out.get("message", ""), out.get("json", ""),
                      base64.b64decode(out.get("raw", "")))

    def stop(self) -> int:
        """Closes its stdin (it exits), then SIGKILL if it does not; the exit code."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
        return self.proc.returncode
