"""The relay (the real cri-resmgr command) in front of a real containerd: the system's 1.6,
and, for the tests marked BOTH, containerd 2.1.9 too (the runtime kubelet talks to next;
CRI v1 only)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from tests.harness import runtimes
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess


@pytest.fixture
def relay_dir():
    d = Path(tempfile.mkdtemp(prefix="crirm-rl-", dir="/tmp"))  # short: unix socket paths
    yield d
    import shutil
    shutil.rmtree(d, ignore_errors=True)


BOTH = pytest.mark.parametrize("runtime", ["1.6", runtimes.CONTAINERD_2], indirect=True,
                               ids=["containerd-1.6", f"containerd-{runtimes.CONTAINERD_2}"])


@pytest.fixture
def relay(runtime, relay_dir):
    r = RelayProcess(relay_dir, str(runtime.socket), ["-policy", "null"])
    r.start()
    yield r
    r.stop()


@pytest.fixture
def via_relay(relay, runtime):
    k = Kubelet(relay.address, cgroup_root=f"{runtime.owned_cgroup_roots[0]}/kubepods")
    yield k
    k.delete_all_pods()
    k.close()


def _pod(name, **res):
    return PodSpec(name=name, containers=[ContainerSpec(name="c", **res)])


@BOTH
def test_full_lifecycle_and_real_cgroups(via_relay):
    k = via_relay
    assert k.version().runtime_name == "containerd"
    pod = _pod("guaranteed", requests={"cpu": "1", "memory": "64Mi"}, limits={"cpu": "1", "memory": "64Mi"})
    h = k.start_pod(pod)
    cid = h.container_ids["c"]
    status = k.container_status(cid).status
    assert status.state == pb.ContainerState.CONTAINER_RUNNING
    cg = k.cgroup_files(cid)
    assert cg.cpu_shares() == 1024
    assert cg.cfs_quota_us() == 100000
    assert cg.memory_limit_in_bytes() == 64 << 20
    assert [c.id for c in k.list_containers(sandbox_id=h.sandbox_id)] == [cid]

    burst = k.start_pod(_pod("burstable", requests={"cpu": "250m"}, limits={"cpu": "500m"}))
    cg = k.cgroup_files(burst.container_ids["c"])
    assert cg.cpu_shares() == 256
    assert cg.cfs_quota_us() == 50000

    k.delete_pod(h)
    k.delete_pod(burst)
    assert k.list_pods() == []


def test_v1alpha2_is_unimplemented_on_2x_through_the_relay_as_directly(relay_dir, containerd_2):
    r = RelayProcess(relay_dir, str(containerd_2.socket), ["-policy", "null"]).start()
    try:
        path = "/runtime.v1alpha2.RuntimeService/Version"
        direct = _error("unix://" + str(containerd_2.socket), path)
        assert direct[0] == grpc.StatusCode.UNIMPLEMENTED
        assert _error(r.address, path) == direct
    finally:
        r.stop()


def test_v1alpha2_through_relay(relay, cgroup_root):
    k = Kubelet(relay.address, api_version="v1alpha2", cgroup_root=f"{cgroup_root}/kubepods")
    try:
        h = k.start_pod(_pod("alpha"))
        assert k.container_status(h.container_ids["c"]).status.state == k.pb.ContainerState.CONTAINER_RUNNING
        k.delete_pod(h)
    finally:
        k.delete_all_pods()
        k.close()


def _raw(address, path, data=b"", timeout=10):
    with grpc.insecure_channel(address) as ch:
        return ch.unary_unary(path)(data, timeout=timeout)


def _error(address, path, data=b""):
    with pytest.raises(grpc.RpcError) as e:
        _raw(address, path, data)
    return e.value.code(), e.value.details()


@BOTH
def test_unknown_method_gets_containerds_own_answer(relay, runtime):
    path = "/runtime.v1.RuntimeService/NoSuchMethodYet"
    direct = _error("unix://" + str(runtime.socket), path, b"\x0a\x03abc")
    assert direct[0] == grpc.StatusCode.UNIMPLEMENTED
    # Repeated: grpcio's aio stream-stream client once turned this into
    # INTERNAL on a fraction of calls.
    relayed = {_error(relay.address, path, b"\x0a\x03abc") for _ in range(25)}
    assert relayed == {direct}


@BOTH
def test_unimplemented_cri_methods_come_back_as_is(relay, runtime):
    # 2.x implements RuntimeConfig: only what it answers with an error is compared here.
    for name in ("RuntimeConfig", "CheckpointContainer", "UpdatePodSandboxResources"):
        path = f"/runtime.v1.RuntimeService/{name}"
        try:
            direct = _raw("unix://" + str(runtime.socket), path)
        except grpc.RpcError as e:
            assert _error(relay.address, path) == (e.code(), e.details())
        else:
            assert _raw(relay.address, path) == direct


@BOTH
def test_errors_keep_code_and_message(relay, runtime):
    req = pb.ContainerStatusRequest(container_id="does-not-exist").SerializeToString()
    path = "/runtime.v1.RuntimeService/ContainerStatus"
    direct = _error("unix://" + str(runtime.socket), path, req)
    assert direct[0] == grpc.StatusCode.NOT_FOUND
    assert _error(relay.address, path, req) == direct


def test_list_containers_with_hundreds(via_relay, runtime):  # 1.6 only: 2.1.9 takes 35 s to create them
    k = via_relay
    n = 300
    pod = PodSpec(name="many", containers=[ContainerSpec(name=f"c{i}") for i in range(n)])
    sandbox = k.run_pod(pod)
    for c in pod.containers:  # created, not started: cheap, and listed all the same
        k.create_container(pod, sandbox, c)
    relayed = k.list_containers(sandbox_id=sandbox)
    with Kubelet(runtime.address) as direct:
        assert sorted(c.id for c in relayed) == sorted(c.id for c in direct.list_containers(sandbox_id=sandbox))
    assert len(relayed) == n
    k.delete_pod(sandbox)


def test_containerd_restarted_under_running_relay(via_relay, relay, make_containerd, relay_dir):
    ctd = make_containerd()
    r = RelayProcess(relay_dir / "r2", str(ctd.socket), ["-policy", "null"]).start()
    try:
        with Kubelet(r.address, cgroup_root=f"{ctd.owned_cgroup_roots[0]}/kubepods") as k:
            h = k.start_pod(_pod("survivor"))
            ctd.stop_daemon()
            with pytest.raises(grpc.RpcError) as e:
                k.version()
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            ctd.start()
            deadline = time.monotonic() + 20
            while True:
                try:
                    k.version()
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline, "calls did not succeed after containerd came back"
                    time.sleep(0.2)
            # The pod started before the restart is still there and running.
            assert k.container_status(h.container_ids["c"]).status.state == pb.ContainerState.CONTAINER_RUNNING
            k.delete_pod(h)
        assert r.proc.poll() is None, "relay exited while containerd was down"
    finally:
        r.stop()


def test_relay_restarted_under_running_client(relay, cgroup_root):
    with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
        assert k.version()
        assert relay.stop() == 0
        assert not os.path.exists(relay.socket), "socket left behind after SIGTERM"
        with pytest.raises(grpc.RpcError):
            k.version()
        relay.start()
        deadline = time.monotonic() + 20
        while True:
            try:
                assert k.version().runtime_name == "containerd"
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.2)


def test_second_relay_on_same_socket_is_refused(relay, containerd):
    import subprocess
    other = RelayProcess(relay.dir, str(containerd.socket), ["-policy", "null"])
    done = subprocess.run(other.command(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "already running" in done.stderr
    assert os.path.exists(relay.socket)  # the live relay's socket was not stolen
    with Kubelet(relay.address) as k:
        assert k.version()


def _dump_run(containerd, relay_dir, cgroup_root, spec, extra=(), env=None):
    dump = relay_dir / "cri.dump"
    r = RelayProcess(relay_dir, str(containerd.socket), ["-policy", "null", "-dump", spec,
                                                         "-dump-file", str(dump), *extra]).start()
    try:
        with Kubelet(r.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            pod = PodSpec(name="dumped", containers=[ContainerSpec(name="app", env=env or {})])
            h = k.start_pod(pod)
            k.container_status(h.container_ids["app"])
            k.delete_pod(h)
    finally:
        assert r.stop() == 0
    return dump


def test_dump_full_records_every_message_and_masks_secrets(containerd, relay_dir, cgroup_root):
    dump = _dump_run(containerd, relay_dir, cgroup_root, "reset,full:.*",
                     env={"DB_PASSWORD": "hunter2", "API_TOKEN": "abc123", "PLAIN": "visible"})
    text = dump.read_text()
    assert oct(os.stat(dump).st_mode & 0o777) == "0o600"
    for method in ("RunPodSandbox", "CreateContainer", "StartContainer", "ContainerStatus",
                   "StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"):
        assert f"=> {method}" in text or "=> " in text and method in text, method
    assert "<= CreateContainer" in text or "<=" in text
    assert "dumped:app" in text  # the pod:container qualifier
    assert "hunter2" not in text and "abc123" not in text
    assert "visible" in text


def test_dump_unredacted_shows_secrets(containerd, relay_dir, cgroup_root):
    dump = _dump_run(containerd, relay_dir, cgroup_root, "full:CreateContainer",
                     extra=["-dump-unredacted"], env={"DB_PASSWORD": "hunter2"})
    assert "hunter2" in dump.read_text()


def test_dump_name_count_and_off_rules(containerd, relay_dir, cgroup_root):
    dump = _dump_run(containerd, relay_dir, cgroup_root,
                     "name:.*,off:ContainerStatus,count:Version")
    text = dump.read_text()
    assert "CreateContainer" in text
    assert "ContainerStatus" not in text.replace("ContainerStatus:", "")  # off: not dumped at all
    assert "config:" not in text  # name level: headers only, no bodies


def test_dump_jsonl(containerd, relay_dir, cgroup_root):
    dump = _dump_run(containerd, relay_dir, cgroup_root, "full:CreateContainer",
                     extra=["-dump-format", "jsonl"])
    records = [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]
    req = [r for r in records if r.get("method") == "CreateContainer" and r.get("direction") in ("request", "=>")]
    assert req and req[0]["body"]["config"]["metadata"]["name"] == "app"
