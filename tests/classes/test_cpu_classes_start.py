"""A configuration with a CPU class this machine's kernel would refuse, or that is wrong
in itself, is refused when `cri-resmgr` starts: exit 2, one line naming the key, before
the runtime is met (the installed console script, on a kernel-like -host-root)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import cpufreq, sysfs

POLICY = """policy:
  Active: topology-aware
  ReservedResources: {CPU: 1}
  topology-aware:
    CPUClasses:
      - {Name: turbo, MinFreq: 3000000}
      - %s
    SharedPoolCPUClass: turbo
"""


def start(tmp_path: Path, entry: str) -> subprocess.CompletedProcess:
    host = tmp_path / "host"
    sysfs.generate(host, cores_per_die=2, threads_per_core=1)
    cpufreq.build(host, [0, 1])
    before = cpufreq.files_under(host)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(POLICY % entry)
    exe = shutil.which("cri-resmgr")
    cmd = [exe] if exe else [sys.executable, "-m", "cri_resmgr.cli"]
    done = subprocess.run([*cmd, "-force-config", str(cfg), "-host-root", str(host),
                           "-relay-socket", str(tmp_path / "relay.sock"), "-state-dir", str(tmp_path / "state"),
                           "-runtime-socket", str(tmp_path / "no-runtime.sock"), "-config-socket", "-",
                           "-agent-socket", "-"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert cpufreq.files_under(host) == before  # refused before anything was written
    return done


@pytest.mark.parametrize("entry,says", [
    ("{Name: x, MinFreq: 2000000, MaxFreq: 1200000}",
     "policy.topology-aware.CPUClasses[1].MaxFreq: 1200000 is below MinFreq 2000000"),
    ("{Name: x, MaxFreq: 5000000}",
     "policy.topology-aware.CPUClasses[1].MaxFreq: 5000000 is above cpuinfo_max_freq 3500000"),
    ("{Name: x, FreqGovernor: ondemand}",
     "policy.topology-aware.CPUClasses[1].FreqGovernor: ondemand is not available here"),
])
def test_a_bad_cpu_class_is_refused_at_start_in_one_line(tmp_path, entry, says):
    done = start(tmp_path, entry)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cri-resmgr: error: ") and says in lines[0], done.stderr
