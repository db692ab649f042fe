"""A session recorded through the real relay on the real containerd, then simulated with
the same policy (the same decisions and final cpusets), and replayed against a fresh
containerd behind a relay with that policy (the same cgroup cpusets)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) < 2, reason="needs at least 2 online CPUs")
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-sim-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def pod(name: str, cpu: str | None = None, limit: bool = True, namespace: str = "default") -> PodSpec:
    res = {"cpu": cpu, "memory": "32Mi"} if cpu else {}
    return PodSpec(name=name, namespace=namespace, containers=[
        ContainerSpec(name="c", requests=res, limits=res if limit else {})])


def cpusets(k: Kubelet) -> dict[str, CPUSet]:
    """pod name -> the cgroup cpuset of its container, for every running container."""
    out = {}
    for c in k.list_containers():
        if c.state == 1:  # CONTAINER_RUNNING
            out[c.labels["io.kubernetes.pod.name"]] = CPUSet(k.cgroup_files(c.id).cpuset_cpus())
    return out


def settled(k: Kubelet, want: dict[str, CPUSet] | None = None, timeout: float = 20.0) -> dict[str, CPUSet]:
    """The cpusets once the relay's own updates have landed (two equal reads, or `want`)."""
    deadline = time.monotonic() + timeout
    last = cpusets(k)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpusets(k)
        if (want is None and now == last) or (want is not None and now == want):
            return now
        last = now
    return last


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "cri_resmgr.cli", *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        pytest.fail(f"cri-resmgr {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def test_recorded_session_simulates_to_the_live_decisions_and_replays_to_the_same_cpusets(
        containerd, cgroup_root, workdir, make_containerd):
    config = workdir / "config.yaml"
    config.write_text(STATIC)
    dump = workdir / "session.jsonl"
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(config), "-dump", "full:.*", "-dump-format", "jsonl",
                          "-dump-file", str(dump)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    direct = Kubelet(containerd.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        k.start_pod(pod("shared"))
        k.start_pod(pod("burst", "250m", limit=False))
        excl = k.start_pod(pod("excl", "1"))
        k.start_pod(pod("second", "1"))  # no exclusive CPU left: runs shared, with a warning
        k.delete_pod(excl)  # its CPU goes back to the shared pool
        k.start_pod(pod("third", "1"))  # gets it
        k.start_pod(pod("system", "1", namespace="kube-system"))  # reserved CPUs
        live = settled(k)
        relay.stop()  # the dump is complete once the relay has stopped
        log = relay.log()
        assert set(live) == {"shared", "burst", "second", "third", "system"}

        sim = json.loads(cli("simulate", "-dump", str(dump), "-force-config", str(config), "-o", "json").stdout)
        assert sim["invariants"]["violations"] == 0 and sim["policy"] == "static"
        simulated = {c["pod"]: CPUSet(c["cpus"]) for c in sim["state"]["containers"] if c["state"] == "running"}
        assert simulated == live
        # Every decision the relay logged, in the same order, with the same words.
        decisions = [d["text"] for s in sim["steps"] for d in s["decisions"] if d["action"] == "allocate"]
        assert len(decisions) == 6
        positions = [log.find(text) for text in decisions]
        assert -1 not in positions, (decisions, log)
        assert positions == sorted(positions)
        assert any("second" in w for w in sim["warnings"]) == (len(ONLINE) == 2)

        # Replay against a fresh containerd, behind a relay with the same policy.
        direct.delete_all_pods()
        fresh = make_containerd()
        relay2 = RelayProcess(workdir / "r2", str(fresh.socket), ["-force-config", str(config)]).start()
        k2 = Kubelet(fresh.address, cgroup_root=f"{cgroup_root}/kubepods")
        try:
            out = cli("replay", "-runtime-socket", relay2.socket, str(dump))
            assert "0 differ from the recording" in out.stdout
            assert settled(k2, want=live) == live
        finally:
            k2.delete_all_pods()
            k2.close()
            relay2.stop()
    finally:
        relay.stop()
        direct.delete_all_pods()
        direct.close()
        k.close()
