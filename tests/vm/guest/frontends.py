"""The two front ends of the engine, as a guest test drives them: the relay (kubelet talks to
its socket, it talks to containerd) and the NRI plugin (kubelet talks to containerd 2.x, which
calls the plugin). `start()` returns once the front end serves with its policy active."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.harness.containerd import Containerd
from tests.harness.relayproc import RelayProcess
from tests.nri.plugin_process import PluginProcess
from tests.vm.guest import cgv2
from tests.vm.guest.conftest import START_TIMEOUT

# (front end, containerd version): the relay on both runtimes, the plugin on 2.x (1.6 has no NRI).
COMBINATIONS = (("relay", "1.6"), ("relay", "2.1.9"), ("plugin", "2.1.9"))


class FrontEnd:
    def __init__(self, kind: str, runtime: Containerd, workdir: Path, config: str, args: tuple[str, ...] = ()):
        self.kind = kind
        self.runtime = runtime
        self.config_path = workdir / "config.yaml"
        self.config_path.write_text(config)
        self.policy = _active(config)
        self._starts = 0
        if kind == "relay":
            self.relay: RelayProcess | None = RelayProcess(workdir, str(runtime.socket),
                                                           ["-force-config", str(self.config_path), *args])
            self.plugin: PluginProcess | None = None
        else:
            self.relay = None
            self.plugin = PluginProcess(workdir / "plugin", str(runtime.layout.nri_socket), "/", config, args=args)

    @property
    def address(self) -> str:
        """Where kubelet's CRI calls go."""
        return self.relay.address if self.relay is not None else self.runtime.address

    @property
    def state_dir(self) -> str:
        return self.relay.state_dir if self.relay is not None else self.plugin.state_dir  # type: ignore[union-attr]

    def log(self) -> str:
        return self.relay.log() if self.relay is not None else self.plugin.log()  # type: ignore[union-attr]

    def pid(self) -> int | None:
        proc: Any = (self.relay or self.plugin).proc  # type: ignore[union-attr]
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> FrontEnd:
        self._starts += 1
        if self.relay is not None:
            self.relay.start(timeout=START_TIMEOUT)
        else:
            assert self.plugin is not None
            self.plugin.start()
        want = f"policy {self.policy} active"
        cgv2.wait_for(f"the {self.kind} with {want} (start {self._starts}):\n{self.log()[-3000:]}",
                      lambda: self.log().count(want) >= self._starts, timeout=START_TIMEOUT)
        if self.plugin is not None:  # configured is not yet synchronized
            cgv2.wait_for(f"the plugin's Synchronize (start {self._starts}):\n{self.log()[-3000:]}",
                          lambda: self.log().count("synchronized:") >= self._starts, timeout=START_TIMEOUT)
        return self

    def kill(self) -> None:
        """kill -9: a crash, nothing saved at exit."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        proc: Any = (self.relay or self.plugin).proc  # type: ignore[union-attr]
        if proc is not None:
            proc.wait(60)
        if self.relay is not None:
            self.relay.proc = None

    def stop(self) -> None:
        if self.relay is not None:
            self.relay.stop(timeout=60)
        elif self.plugin is not None:
            self.plugin.stop(timeout=60)


def _active(config: str) -> str:
    for line in config.splitlines():
        if line.strip().startswith("Active:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"no policy.Active in {config!r}")
