"""`scripts/containerd-up.sh DIR -nri` (README, "Try it safely"): a throwaway containerd 2.1.9
with NRI on, which the NRI plugin registers with, and `scripts/containerd-down.sh DIR` ends it
by its PID and leaves nothing under DIR."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import runtimes
from tests.nri.plugin_process import PluginProcess

REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has ended: only its exit status is left for its parent
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_containerd_up_nri_starts_a_runtime_the_plugin_registers_with_and_down_ends_it():
    why = runtimes.missing_reason(runtimes.CONTAINERD_2)
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    work = Path(tempfile.mkdtemp(prefix="crirm-up-", dir="/tmp"))  # short: unix socket paths
    ctd_dir = work / "ctd"
    plugin = None
    try:
        up = subprocess.run(["bash", str(REPO / "scripts/containerd-up.sh"), str(ctd_dir), "-nri",
                             "--cgroup-root", f"/crirm-test-{secrets.token_hex(4)}"],
                            capture_output=True, text=True, timeout=180)
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines() == [str(ctd_dir / "containerd.sock"), str(ctd_dir / "nri.sock")], up.stdout
        pid = int((ctd_dir / "containerd.pid").read_text())
        assert _alive(pid)
        plugin = PluginProcess(work / "plugin", str(ctd_dir / "nri.sock"), "/").start()
        deadline = time.monotonic() + 60
        while "registered with the runtime" not in plugin.log():
            assert plugin.proc is not None and plugin.proc.poll() is None, plugin.log()
            assert time.monotonic() < deadline, plugin.log()
            time.sleep(0.1)
        assert f"containerd {runtimes.CONTAINERD_2}" in plugin.log() or "v2.1.9" in plugin.log(), plugin.log()
        assert plugin.stop() is not None  # by its PID: SIGTERM
        plugin = None
        down = subprocess.run(["bash", str(REPO / "scripts/containerd-down.sh"), str(ctd_dir)],
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert not _alive(pid) and not ctd_dir.exists()
    finally:
        if plugin is not None:
            plugin.stop()
        if ctd_dir.exists():
            subprocess.run(["bash", str(REPO / "scripts/containerd-down.sh"), str(ctd_dir)], timeout=120)
        shutil.rmtree(work, ignore_errors=True)
