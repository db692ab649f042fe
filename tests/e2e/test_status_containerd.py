"""Issue 15's done-when for introspection, on the real containerd: with the static policy
on this 2-CPU machine, `cri-resmgr status` shows the Guaranteed container on its CPU and
the others on the rest, and its JSON matches the containers' real cgroups."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
RESERVED, EXCLUSIVE = ONLINE.sorted()  # the allocator reserves the machine's first CPU
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-st-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(port: int, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cri_resmgr.cli", "status", "-address", f":{port}", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _matches_cgroups(k: Kubelet, doc: dict) -> list[str]:
    """What differs between the JSON and the real cgroups (none: they match)."""
    wrong = []
    for c in doc["containers"]:
        files = k.cgroup_files(c["id"])
        real = (CPUSet(files.cpuset_cpus()), CPUSet(files.cpuset_mems()))
        said = (CPUSet(c["cpus"]), CPUSet(c["mems"]))
        if real != said:
            wrong.append(f"{c['pod']}:{c['name']}: cgroup {real}, state {said}")
    return wrong


def test_status_shows_the_guaranteed_container_on_its_cpu_and_matches_the_cgroups(containerd, cgroup_root,
                                                                                   workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text(STATIC)
    port = _free_port()
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-metrics-address", f"127.0.0.1:{port}"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        k.start_pod(PodSpec(name="st-shared", containers=[ContainerSpec(name="c")]))
        res = {"cpu": "1", "memory": "32Mi"}
        k.start_pod(PodSpec(name="st-excl", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
        # The shared container's cpuset shrinks by an update sent after the create: wait for it.
        deadline = time.monotonic() + 20
        while True:
            doc = json.loads(_status(port, "-o", "json"))
            wrong = _matches_cgroups(k, doc)
            if not wrong:
                break
            assert time.monotonic() < deadline, wrong
            time.sleep(0.2)
        by_pod = {c["pod"]: c for c in doc["containers"]}
        assert set(by_pod) == {"st-shared", "st-excl"}
        excl, shared = by_pod["st-excl"], by_pod["st-shared"]
        assert (excl["qos"], excl["pool"], excl["exclusive_cpus"], excl["shared_cpus"]) == \
            ("Guaranteed", "exclusive", str(EXCLUSIVE), "")
        assert (shared["qos"], shared["pool"], shared["exclusive_cpus"], shared["shared_cpus"]) == \
            ("BestEffort", "shared", "", str(RESERVED))
        assert doc["pools"] == {"exclusive": str(EXCLUSIVE), "reserved": str(RESERVED), "shared": str(RESERVED)}
        assert doc["config"]["source"] == str(cfg) and doc["topology"]["online"] == str(ONLINE)

        text = _status(port)
        assert f"CPU {EXCLUSIVE} st-excl:c" in text, text  # the Guaranteed container on its CPU
        assert f"CPU {RESERVED} shared/reserved" in text, text  # the others on the rest
        rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("st-")}
        assert rows["st-excl:c"][6:9] == ["exclusive", str(EXCLUSIVE), "-"]
        assert rows["st-shared:c"][6:9] == ["shared", "-", str(RESERVED)]

        image = workdir / "node.svg"
        _status(port, "-o", "svg", str(image))
        names = {t.text for t in ET.parse(image).getroot().iter("{http://www.w3.org/2000/svg}text")}
        assert {"st-excl:c", "st-shared:c"} <= names
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


def test_status_under_the_none_policy_shows_the_running_pods_with_their_real_cpusets(containerd, cgroup_root,
                                                                                     workdir):
    """Issue 29: under `-policy none`, the documented first step, status said "No containers."
    while pods ran. It shows each running container, its cgroup's cpuset, and "not managed"."""
    port = _free_port()
    relay = RelayProcess(workdir, str(containerd.socket), ["-metrics-address", f"127.0.0.1:{port}"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        k.start_pod(PodSpec(name="un-a", containers=[ContainerSpec(name="c")]))
        doc = json.loads(_status(port, "-o", "json"))
        assert doc["policy"] == "none"
        [c] = [c for c in doc["containers"] if c["pod"] == "un-a"]
        assert (c["namespace"], c["name"], c["managed"], c["pool"]) == ("default", "c", False, None)
        assert _matches_cgroups(k, {"containers": [c]}) == []
        assert CPUSet(c["cpus"]) == ONLINE  # no policy: the runtime's default, every CPU
        text = _status(port)
        assert "No containers." not in text
        [row] = [line for line in text.splitlines() if line.startswith("c ") or line.startswith("un-a:c ")]
        assert "not managed" in row and str(ONLINE) in row and c["id"][:12] in row
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
