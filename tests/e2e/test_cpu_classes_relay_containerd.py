"""CPU classes through the `cri-resmgr` process in front of the session's containerd, with
-host-root a generated tree of this machine's 2 CPUs and cpufreq, cpuidle and uncore files
(tests/harness/cpufreq.py; this machine has no cpufreq): a Guaranteed container's CPU has
its class's limits and governor when the start returns, the shared pool's back after the
pod goes; `cri-resmgr status` (text and JSON) says which CPUs have which class; the
metrics count the writes; this machine's own files are untouched."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from tests.harness import cpufreq, sysfs
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

CONFIG = """policy:
  Active: static
  ReservedResources: {CPU: 1}
  static:
    CPUClasses:
      - {Name: turbo, MinFreq: 3000000, MaxFreq: 3500000, FreqGovernor: performance}
      - {Name: eco, MaxFreq: 1800000, FreqGovernor: powersave}
    DefaultExclusiveCPUClass: turbo
    SharedPoolCPUClass: eco
"""
FILES = ("scaling_min_freq", "scaling_max_freq", "scaling_governor")
TURBO = ("3000000", "3500000", "performance")
ECO = ("800000", "1800000", "powersave")


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-cpucls-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(port: int, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cri_resmgr.cli", "status", "-address", f":{port}", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_relay_process_sets_a_guaranteed_cpus_class_and_status_shows_it(containerd, cgroup_root, workdir):
    host = workdir / "host"
    sysfs.generate(host, cores_per_die=2, threads_per_core=1)
    cpufreq.build(host, [0, 1])
    before = cpufreq.files_under(Path("/"))
    cfg = workdir / "config.yaml"
    cfg.write_text(CONFIG)
    port = _port()

    def cpu(n: int) -> tuple[str, ...]:
        return tuple((host / f"sys/devices/system/cpu/cpu{n}/cpufreq/{f}").read_text().strip() for f in FILES)

    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg), "-host-root", str(host),
                                                           "-metrics-address", f"127.0.0.1:{port}"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        assert cpu(0) == cpu(1) == ECO
        res = {"cpu": "1", "memory": "32Mi"}
        g = k.start_pod(PodSpec(name="cc-turbo", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
        assert k.cgroup_files(g.container_ids["c"]).cpuset_cpus() == "1"
        assert cpu(1) == TURBO and cpu(0) == ECO
        doc = json.loads(_status(port, "-o", "json"))
        assert doc["cpu_classes"] == {"eco": "0", "turbo": "1"} and doc["cpu_class_failures"] == []
        assert "CPU classes: eco 0, turbo 1" in _status(port).splitlines()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert 'cri_resmgr_cpu_class_cpus{class="turbo"} 1.0' in metrics
        assert "cri_resmgr_cpu_class_failures_total 0.0" in metrics
        k.delete_pod(g)  # the relay releases the CPU as it passes the pod's stop on
        assert cpu(1) == ECO
        assert json.loads(_status(port, "-o", "json"))["cpu_classes"] == {"eco": "0-1"}
    finally:
        k.close()
        relay.stop()
    assert cpufreq.files_under(Path("/")) == before
