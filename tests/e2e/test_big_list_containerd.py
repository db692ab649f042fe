"""A 12 MiB ListContainers reply from the real containerd passes the relay (the cri-resmgr
command, both transports, static policy: the reply observed by crash detection) and is
read: a container exited behind it is released on that reply.

Thousands of real containers take too long to create here, so the size comes from a few
created (not started) containers with 1 MiB of annotations each; the thousands-of-items
replies of 5-16 MiB are in tests/transport/test_message_sizes.py, from the runtime double."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import KUBELET_MAX_MESSAGE, Kubelet, grpc_target
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) < 2, reason="needs at least 2 online CPUs")
MiB = 1 << 20
ALL = str(ONLINE)
RESERVED = str(CPUSet([ONLINE.min()]))
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"
LIST = "/runtime.v1.RuntimeService/ListContainers"


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-big-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def wait_for(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.1)
    return value


def raw_list(address: str) -> bytes:
    with grpc.insecure_channel(grpc_target(address),
                               options=[("grpc.max_receive_message_length", KUBELET_MAX_MESSAGE)]) as ch:
        return ch.unary_unary(LIST)(pb.ListContainersRequest().SerializeToString(), timeout=60)


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_a_12_mib_list_containers_reply_passes_observed(containerd, cgroup_root, workdir, transport):
    config = workdir / "config.yaml"
    config.write_text(STATIC)
    # No periodic reconcile: only the observed ListContainers reply can release the CPU.
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(config), "-reconcile-period", "0",
                          "-relay-transport", transport]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    direct = Kubelet(containerd.address)
    try:
        watcher = k.start_pod(PodSpec(name="watcher", containers=[ContainerSpec(name="c")]))
        shared = watcher.container_ids["c"]
        big = PodSpec(name="big", containers=[ContainerSpec(name=f"c{i}", annotations={"pad": chr(97 + i) * MiB})
                                              for i in range(12)])
        sandbox = k.run_pod(big)
        for c in big.containers:  # through the relay: intercepted CreateContainer requests of 1 MiB
            k.create_container(big, sandbox, c)
        res = {"cpu": "1", "memory": "32Mi"}
        crasher = PodSpec(name="crasher", containers=[ContainerSpec(name="c", requests=res, limits=res,
                                                                    command=["/bin/sh", "-c", "sleep 1; exit 3"])])
        exclusive = k.start_pod(crasher).container_ids["c"]
        wait_for(lambda: k.cgroup_files(shared).cpuset_cpus() == RESERVED, "the shared container shrunk")
        # Asked of containerd itself: a ContainerStatus through the relay would be observed too.
        wait_for(lambda: direct.container_status(exclusive).status.state == pb.CONTAINER_EXITED, "the exit")

        assert k.cgroup_files(shared).cpuset_cpus() == RESERVED  # nothing has told the relay yet
        reply = raw_list(relay.address)
        assert len(reply) >= 12 * MiB
        listed = pb.ListContainersResponse.FromString(reply).containers
        assert sorted(c.id for c in listed) == sorted(c.id for c in direct.list_containers())
        assert {len(c.annotations["pad"]) for c in listed if "pad" in c.annotations} == {MiB}
        # Read on its way: the exited container's CPU goes back to the shared pool.
        wait_for(lambda: k.cgroup_files(shared).cpuset_cpus() == ALL, "the CPU released on the reply")
    finally:
        k.delete_all_pods()
        k.close()
        direct.close()
        relay.stop()
