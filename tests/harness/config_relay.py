"""A stand-in for the relay's side of the agent link: the relay's real Config
server on its own event loop thread, with a small validating applier in place
of the relay's configuration framework. Used by the agent's tests and the
Config service's."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import yaml

from cri_resmgr.config.service import ConfigServer

# The modules and their top-level keys this stand-in for the relay knows.
KNOWN_MODULES = {
    "policy": {"Active", "ReservedResources", "AvailableResources"},
    "logger": {"Debug", "LogSource"},
    "dump": {"Config", "File"},
}


class YamlApplier:
    """Stands in for the relay's configuration framework: validates and keeps the configuration."""

    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.sources: list[str] = []
        self.attempts: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def apply(self, data: dict[str, str], source: str) -> str | None:
        with self._lock:
            self.attempts.append(dict(data))
            for module, text in sorted(data.items()):
                if module not in KNOWN_MODULES:
                    return f'unknown configuration module "{module}"'
                try:
                    parsed = yaml.safe_load(text)
                except yaml.YAMLError as exc:
                    return f'module "{module}": invalid YAML: {exc}'
                if parsed is None:
                    continue
                if not isinstance(parsed, dict):
                    return f'module "{module}": expected a mapping, got {type(parsed).__name__}'
                unknown = sorted(set(parsed) - KNOWN_MODULES[module])
                if unknown:
                    return f'module "{module}": unknown key(s) {", ".join(unknown)}'
            self.config = dict(data)
            self.sources.append(source)
            return None

    def current(self) -> dict[str, str]:
        with self._lock:
            return dict(self.config)


class RelayHarness:
    """The relay's real Config server on its own event loop thread; can go down and come back."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.applier = YamlApplier()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="relay-loop")
        self._thread.start()
        self._server: ConfigServer | None = None

    def _run(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> None:
        self._server = ConfigServer(self.applier, self.socket_path)
        self._run(self._server.start())

    def stop(self, leave_stale_socket: bool = False) -> None:
        """Stops serving; `leave_stale_socket` leaves a dead socket file, as a crashed relay does."""
        if self._server is not None:
            self._run(self._server.stop(0))
            self._server = None
        if leave_stale_socket:
            with socket.socket(socket.AF_UNIX) as dead:
                dead.bind(self.socket_path)

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
