"""A configuration with a bad scheduling class or IRQ setting is refused when either
front end starts (the relay's console script and the NRI plugin's command): exit 2, one
line naming the key, before the runtime is met; nothing under -host-root written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import sysfs

POLICY = """policy:
  Active: %s
  ReservedResources: {CPU: 1}
  %s:
%s
"""


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def start(tmp_path: Path, policy: str, section: str, plugin: bool) -> subprocess.CompletedProcess:
    host = tmp_path / "host"
    sysfs.generate(host, cores_per_die=2, threads_per_core=1)
    before = _files(host)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(POLICY % (policy, policy, section))
    common = ["-force-config", str(cfg), "-host-root", str(host), "-state-dir", str(tmp_path / "state"),
              "-config-socket", "-"]
    if plugin:
        cmd = [sys.executable, "-m", "cri_resmgr.nri.cli", *common, "-nri-socket", str(tmp_path / "no-nri.sock")]
    else:
        exe = shutil.which("cri-resmgr")
        cmd = [*([exe] if exe else [sys.executable, "-m", "cri_resmgr.cli"]), *common,
               "-relay-socket", str(tmp_path / "relay.sock"), "-runtime-socket", str(tmp_path / "no-runtime.sock"),
               "-agent-socket", "-"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert _files(host) == before
    return done


@pytest.mark.parametrize("policy,section,says", [
    ("balloons", "    SchedulingClasses:\n      - {Name: rt, Policy: fifo, Priority: 200}",
     "policy.balloons.SchedulingClasses[0].Priority: 200 is not in 1..99 for fifo"),
    ("topology-aware", "    SchedulingClasses:\n      - {Name: b, IOClass: be, IOPriority: 8}",
     "policy.topology-aware.SchedulingClasses[0].IOPriority: 8 is not in 0..7"),
    ("balloons", "    BalloonTypes:\n      - {Name: q, IRQMode: isolate}",
     "policy.balloons.BalloonTypes[0].IRQMode"),
])
@pytest.mark.parametrize("plugin", [False, True], ids=["relay", "plugin"])
def test_a_bad_scheduling_class_or_irq_setting_is_refused_at_start_in_one_line(tmp_path, policy, section, says,
                                                                               plugin):
    done = start(tmp_path, policy, section, plugin)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and says in lines[0], done.stderr
