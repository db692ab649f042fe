"""A bad scheduling class or interrupt list stops either front end at start: exit 2, one
line naming the key (the policy's section is checked before the runtime is met)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    ("policy:\n  Active: balloons\n  balloons:\n    SchedulingClasses:\n      - {Name: rt, Policy: fifo, Priority: 200}\n",
     "policy.balloons.SchedulingClasses[0].Priority: 200 is not in 1..99 for fifo"),
    ("policy:\n  Active: topology-aware\n  topology-aware:\n    SchedulingClasses: [{Name: a, IOClass: be, "
     "IOPriority: 9}]\n", "policy.topology-aware.SchedulingClasses[0].IOPriority: 9 is not in 0..7"),
    ("policy:\n  Active: static\n  static:\n    PodQoSSchedulingClasses: {BestEffort: nope}\n",
     "policy.static.PodQoSSchedulingClasses.BestEffort: scheduling class 'nope' is not in SchedulingClasses"),
    ("policy:\n  Active: balloons\n  balloons:\n    ControllableInterrupts: [24]\n    BalloonTypes:\n"
     "      - {Name: q, IRQMode: drain}\n", "policy.balloons.BalloonTypes[0].IRQMode: 'drain' is not one of sink"),
]


@pytest.mark.parametrize("module", ["cri_resmgr.cli", "cri_resmgr.nri.cli"])
@pytest.mark.parametrize(("config", "message"), CASES)
def test_refused_at_start_with_the_key(tmp_path, module, config, message):
    path = tmp_path / "config.yaml"
    path.write_text(config)
    args = ["-force-config", str(path), "-state-dir", str(tmp_path / "state")]
    if module == "cri_resmgr.cli":
        args += ["-relay-socket", str(tmp_path / "r.sock"), "-runtime-socket", str(tmp_path / "none.sock"),
                 "-config-socket", str(tmp_path / "c.sock")]
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
