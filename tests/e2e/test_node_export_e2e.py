"""End to end: the relay's placements -> its Agent client (-agent-socket) -> the real
agent process -> the (test) API server: the Node carries the free exclusive CPUs per
NUMA node and the pools, and follows a change. Without an agent the relay logs nothing
about it above debug level."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cri_resmgr.frontend.nodeexport import ANNOTATION
from cri_resmgr.topology import discover
from tests.harness.kubeapi import FakeKubeAPI
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) < 2, reason="needs at least 2 online CPUs")
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"


def _wait_for(cond, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.1)


def _agent(workdir: Path, kubeconfig: str, relay: RelayProcess, socket: str) -> subprocess.Popen:
    log = open(workdir / "agent.log", "ab")  # noqa: SIM115 - the process holds it
    return subprocess.Popen([sys.executable, "-m", "cri_resmgr_agent", "-kubeconfig", kubeconfig,
                             "-config-socket", relay.config_socket, "-agent-socket", socket,
                             "-metrics-address", "127.0.0.1:0"],
                            env={**os.environ, "NODE_NAME": "node1"}, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_relay_publishes_free_exclusive_cpus_on_its_node(containerd, cgroup_root, tmp_path):
    workdir = Path(tmp_path)
    agent_socket = str(workdir / "agent.sock")
    api = FakeKubeAPI().start()
    cfg = workdir / "config.yaml"
    cfg.write_text(STATIC)
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-agent-socket", agent_socket, "-agent-export-interval", "0.5",
                          "-logger-debug", "agent"]).start()
    agent = None
    try:
        kubeconfig = api.write_kubeconfig(str(workdir / "kubeconfig"))
        api.put_node("node1")
        time.sleep(1.5)  # a few rounds of looking for an agent that is not there
        no_agent = [line for line in relay.log().splitlines() if "agent" in line.lower()]
        assert all(" DEBUG " in line or "debug" in line.lower() for line in no_agent), no_agent
        assert len([line for line in no_agent if "not available" in line]) == 1, no_agent

        agent = _agent(workdir, kubeconfig, relay, agent_socket)

        def published():
            value = api.get_object("nodes", "", "node1")["metadata"].get("annotations", {}).get(ANNOTATION)
            return json.loads(value) if value else None

        doc = _wait_for(published, "the annotation on the Node")
        free_before = sum(n["freeExclusiveCount"] for n in doc["numaNodes"].values())
        assert doc["policy"] == "static"
        assert doc["pools"]["reserved"]["cpus"] and doc["pools"]["shared"]["exclusive"] == ""
        # static without StrictReservation: the reserved CPU stays in the shared pool and is
        # never exclusive; every other CPU can be (the shared pool keeps the reserved one).
        assert free_before == len(ONLINE) - 1

        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            res = {"cpu": "1", "memory": "32Mi"}
            k.start_pod(PodSpec(name="x", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
            doc = _wait_for(lambda: (d := published()) and d["pools"]["shared"]["exclusive"] and d,
                            "the exclusive CPU on the Node")
            assert sum(n["freeExclusiveCount"] for n in doc["numaNodes"].values()) == free_before - 1
            assert doc["pools"]["shared"]["shared"] != doc["pools"]["shared"]["cpus"]
            k.delete_all_pods()
    finally:
        if agent is not None:
            _stop(agent)
        relay.stop()
        api.stop()
