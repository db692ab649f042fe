"""End to end: ConfigMaps in a (test) API server -> the real agent process -> the
real relay process -> the real containerd: running containers' real cpusets change."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubeapi import FakeKubeAPI
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
ALL = str(ONLINE)
RESERVED = str(CPUSet([ONLINE.min()]))
EXCLUSIVE = str(CPUSet([ONLINE.max()]))
NS, BASE = "kube-system", "cri-resmgr-config"
ERROR_ANNOTATION = "cri-resource-manager.intel.com/config-error"


class AgentProcess:
    def __init__(self, workdir: Path, kubeconfig: str, relay: RelayProcess):
        self.log_path = workdir / "agent.log"
        self.cmd = [sys.executable, "-m", "cri_resmgr_agent", "-kubeconfig", kubeconfig,
                    "-config-socket", relay.config_socket, "-agent-socket", str(workdir / "agent.sock"),
                    "-metrics-address", "127.0.0.1:0"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, env={**os.environ, "NODE_NAME": "node1"},
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def wait_for(cond, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.1)


def test_configmap_changes_reach_real_cpusets(containerd, cgroup_root):
    workdir = Path(tempfile.mkdtemp(prefix="crirm-ag-", dir="/tmp"))
    api = FakeKubeAPI().start()
    relay = agent = None
    k = None
    try:
        kubeconfig = api.write_kubeconfig(str(workdir / "kubeconfig"))
        api.put_node("node1")
        relay = RelayProcess(workdir, str(containerd.socket)).start()  # no -force-config: the agent decides
        k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
        res = {"cpu": "1", "memory": "32Mi"}
        shared = k.start_pod(PodSpec(name="s", containers=[ContainerSpec(name="c")])).container_ids["c"]
        excl = k.start_pod(PodSpec(name="g", containers=[ContainerSpec(name="c", requests=res, limits=res)]
                                   )).container_ids["c"]

        def cpusets():
            return (CPUSet(k.cgroup_files(shared).cpuset_cpus()), CPUSet(k.cgroup_files(excl).cpuset_cpus()))

        assert cpusets() == (ONLINE, ONLINE)  # policy none: nothing pinned

        agent = AgentProcess(workdir, kubeconfig, relay).start()
        # The default map switches the running relay to static: running containers move.
        api.put_configmap(NS, f"{BASE}.default", {"policy": "Active: static\nReservedResources:\n  CPU: 1\n"})
        wait_for(lambda: cpusets() == (CPUSet(RESERVED), CPUSet(EXCLUSIVE)), "static policy on running containers")

        # A node-specific map wins over the default one and replaces it entirely.
        api.put_configmap(NS, f"{BASE}.node.node1", {"policy": "Active: none\n"})
        wait_for(lambda: cpusets() == (ONLINE, ONLINE), "the node map's policy none")

        # An invalid map is rejected: the old configuration stays, the error shows on the Node.
        api.put_configmap(NS, f"{BASE}.node.node1", {"policy": "Active: static\nReservedCPUs: 1\n"})
        wait_for(lambda: "policy.ReservedCPUs: unknown key" in
                 api.get_object("nodes", "", "node1")["metadata"].get("annotations", {}).get(ERROR_ANNOTATION, ""),
                 "the rejection on the node annotation")
        assert cpusets() == (ONLINE, ONLINE)

        # Fixed map: accepted, the annotation goes away.
        api.put_configmap(NS, f"{BASE}.node.node1", {"policy": "Active: static\nReservedResources:\n  CPU: 1\n"})
        wait_for(lambda: cpusets() == (CPUSet(RESERVED), CPUSet(EXCLUSIVE)), "the fixed node map")
        wait_for(lambda: ERROR_ANNOTATION not in api.get_object("nodes", "", "node1")["metadata"].get(
            "annotations", {}), "the error annotation removed")

        # The relay remembers the agent's configuration across a restart, even
        # while the agent (which only pushes changes) stays quiet.
        agent.stop()
        relay.kill()
        relay.start()
        assert "configuration from last agent configuration in force: policy static" in relay.log()
        k.delete_all_pods()
    finally:
        if agent:
            agent.stop()
        if k:
            k.close()
        if relay:
            relay.stop()
        api.stop()
        shutil.rmtree(workdir, ignore_errors=True)
