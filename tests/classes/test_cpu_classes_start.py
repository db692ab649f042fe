"""A configuration with a CPU class this machine's kernel would refuse, or that is wrong
in itself, is refused when `cri-resmgr` starts: exit 2, one line naming the key, before
the runtime is met (the relay's installed console script and the NRI plugin's command, on
a kernel-like -host-root)."""

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


def start(tmp_path: Path, entry: str, plugin: bool = False) -> subprocess.CompletedProcess:
    host = tmp_path / "host"
    sysfs.generate(host, cores_per_die=2, threads_per_core=1)
    cpufreq.build(host, [0, 1])
    before = cpufreq.files_under(host)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(POLICY % entry)
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
@pytest.mark.parametrize("plugin", [False, True], ids=["relay", "plugin"])
def test_a_bad_cpu_class_is_refused_at_start_in_one_line(tmp_path, entry, says, plugin):
    done = start(tmp_path, entry, plugin)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: " in lines[0] and says in lines[0], done.stderr
