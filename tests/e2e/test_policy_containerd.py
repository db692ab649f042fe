"""Policies through the real relay process, against the real containerd, checked in
the real cgroup files and /proc/PID/status. This machine has 2 CPUs: reserve 1,
give 1 exclusive."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cgroupfs
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) < 2, reason="needs at least 2 online CPUs")
ALL = str(ONLINE)
RESERVED = str(CPUSet([ONLINE.min()]))  # the allocator takes the first CPU of the machine
EXCLUSIVE = str(CPUSet([ONLINE.sorted()[1]])) if len(ONLINE) == 2 else None


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-pc-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _config(workdir: Path, text: str) -> Path:
    p = workdir / "config.yaml"
    p.write_text(text)
    return p


STATIC = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n"


def besteffort(name):
    return PodSpec(name=name, containers=[ContainerSpec(name="c")])


def guaranteed(name, cpu="1"):
    res = {"cpu": cpu, "memory": "32Mi"}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def cpuset_of(k: Kubelet, cid: str) -> str:
    return k.cgroup_files(cid).cpuset_cpus()


def allowed_of(k: Kubelet, cid: str) -> str:
    return cgroupfs.cpus_allowed_list(k.container_pid(cid))


def wait_state(relay: RelayProcess, ok, timeout: float = 10.0) -> dict:
    """State is saved shortly after a change (coalesced): wait for it, bounded."""
    path = Path(relay.state_dir) / "state.json"
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(path.read_text())
        if ok(state):
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"state file never satisfied the check: {state}")
        time.sleep(0.05)


def wait_cpuset(k: Kubelet, cid: str, want: str, timeout: float = 20.0) -> None:
    """Unsolicited updates are asynchronous: wait (bounded) until they land."""
    deadline = time.monotonic() + timeout
    while True:
        got, allowed = cpuset_of(k, cid), allowed_of(k, cid)
        if CPUSet(got) == CPUSet(want) and CPUSet(allowed) == CPUSet(want):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"container {cid[:12]}: cpuset {got}, Cpus_allowed_list {allowed}, want {want}")
        time.sleep(0.1)


@pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
def test_static_exclusive_cpu_shrinks_and_grows_shared_with_kill9_restarts(containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        shared = k.start_pod(besteffort("shared"))
        a = shared.container_ids["c"]
        wait_cpuset(k, a, ALL)

        excl = k.start_pod(guaranteed("exclusive"))
        g = excl.container_ids["c"]
        wait_cpuset(k, g, EXCLUSIVE)
        wait_cpuset(k, a, RESERVED)  # the shared pool shrank to the reserved CPU

        relay.kill()  # crash between steps
        relay.start()
        state = json.loads((Path(relay.state_dir) / "state.json").read_text())
        assert state["policy"] == "static"
        assert any(v["exclusive"] == EXCLUSIVE for v in state["assignments"].values())

        # After the restart the exclusive CPU is still taken: a second Guaranteed
        # container must not get it (no double booking); it runs shared.
        second = k.start_pod(guaranteed("second"))
        g2 = second.container_ids["c"]
        wait_cpuset(k, g2, RESERVED)
        wait_cpuset(k, g, EXCLUSIVE)
        wait_cpuset(k, a, RESERVED)

        relay.kill()
        relay.start()
        k.delete_pod(excl)  # the exclusive CPU goes back to the shared pool
        wait_cpuset(k, a, ALL)
        wait_cpuset(k, g2, ALL)
        wait_state(relay, lambda s: all(v["exclusive"] == "" for v in s["assignments"].values()))

        k.delete_pod(shared)
        k.delete_pod(second)
        wait_state(relay, lambda s: s["assignments"] == {} and s["containers"] == {})  # nothing leaked
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


@pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
def test_static_exclusive_cpu_through_the_relay_on_containerd_2(containerd_2, workdir):
    """The runtime kubelet talks to next (CRI v1 only): the policy's cpusets land in the
    real cgroups, the shared container shrinks and grows back."""
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd_2.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{containerd_2.owned_cgroup_roots[0]}/kubepods")
    try:
        a = k.start_pod(besteffort("shared2")).container_ids["c"]
        excl = k.start_pod(guaranteed("exclusive2"))
        wait_cpuset(k, excl.container_ids["c"], EXCLUSIVE)
        wait_cpuset(k, a, RESERVED)
        k.delete_pod(excl)
        wait_cpuset(k, a, ALL)
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


@pytest.mark.parametrize("kubelet_version", ["1.35", "1.36"])
def test_container_exiting_on_its_own_releases_its_cpu(containerd, cgroup_root, workdir, kubelet_version):
    """kubelet 1.36 lists with StreamContainers first: containerd 1.6 answers UNIMPLEMENTED,
    the relay passes that on, and the ListContainers kubelet falls back to is read as before."""
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods", kubelet_version=kubelet_version)
    try:
        shared = k.start_pod(besteffort("watcher"))
        a = shared.container_ids["c"]
        pod = guaranteed("crasher")
        pod.containers[0].command = ["/bin/sh", "-c", "sleep 1; exit 3"]
        h = k.start_pod(pod)
        wait_cpuset(k, a, RESERVED)
        time.sleep(1.5)
        # kubelet notices exits through ListContainers; so does the relay.
        k.list_containers()
        assert k.streams_lists is False  # 1.36: fell back on containerd's UNIMPLEMENTED
        wait_cpuset(k, a, ALL)
        k.delete_pod(h)
        k.delete_pod(shared)
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


def test_dry_run_decides_but_changes_nothing(containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    dump = workdir / "dump.txt"
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-dry-run", "-dump", "name:CreateContainer",
                          "-dump-file", str(dump)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        shared = k.start_pod(besteffort("dry-shared"))
        excl = k.start_pod(guaranteed("dry-excl"))
        time.sleep(1)
        assert CPUSet(cpuset_of(k, excl.container_ids["c"])) == ONLINE
        assert CPUSet(cpuset_of(k, shared.container_ids["c"])) == ONLINE
        assert f"would set default/dry-excl:c: cpuset {EXCLUSIVE or ''}" in relay.log()
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
    assert "dry-run: would set" in dump.read_text()


def test_corrupt_state_file_is_moved_aside_and_relay_serves(containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)])
    Path(relay.state_dir).mkdir(parents=True)
    (Path(relay.state_dir) / "state.json").write_text("{not json")
    relay.start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            h = k.start_pod(guaranteed("after-corruption"))
            wait_cpuset(k, h.container_ids["c"], EXCLUSIVE or ALL)
            k.delete_pod(h)
        assert "is unusable" in relay.log()
        assert list(Path(relay.state_dir).glob("state.json.bad-*"))
    finally:
        relay.stop()


def test_bad_annotation_is_logged_and_ignored(containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            pod = guaranteed("bad-annotation")
            pod.annotations["cri-resource-manager.intel.com/prefer-shared-cpus"] = "perhaps"
            pod.annotations["intel.com/resources"] = "{broken"
            h = k.start_pod(pod)
            wait_cpuset(k, h.container_ids["c"], EXCLUSIVE or ALL)
            k.delete_pod(h)
        log = relay.log()
        assert "default/bad-annotation:c: ignoring annotation cri-resource-manager.intel.com/prefer-shared-cpus" in log
        assert "ignoring annotation intel.com/resources" in log
    finally:
        relay.stop()


def test_prefer_shared_annotation_keeps_guaranteed_container_shared(containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            pod = guaranteed("prefers-shared")
            pod.annotations["cri-resource-manager.intel.com/prefer-shared-cpus/container.c"] = "true"
            h = k.start_pod(pod)
            wait_cpuset(k, h.container_ids["c"], ALL)
            k.delete_pod(h)
    finally:
        relay.stop()


@pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
def test_sighup_rereads_forced_config_and_keeps_it_when_broken(containerd, cgroup_root, workdir):
    import signal
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        a = k.start_pod(besteffort("hup-shared")).container_ids["c"]
        g = k.start_pod(guaranteed("hup-excl")).container_ids["c"]
        wait_cpuset(k, a, RESERVED)
        cfg.write_text("policy: {Active: static, Bogus: 1}\n")
        relay.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "SIGHUP: keeping the current configuration" not in relay.log():
            assert time.monotonic() < deadline, relay.log()
            time.sleep(0.1)
        assert "policy.Bogus: unknown key" in relay.log()
        wait_cpuset(k, g, EXCLUSIVE)  # still in force
        cfg.write_text("policy: {Active: none}\n")
        relay.signal(signal.SIGHUP)
        wait_cpuset(k, a, ALL)  # switching to none gives every container all CPUs back
        wait_cpuset(k, g, ALL)
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


def test_metrics_endpoint(containerd, cgroup_root, workdir):
    import socket as socketlib
    import urllib.error
    import urllib.request
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-metrics-address", f"127.0.0.1:{port}"]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods") as k:
            k.start_pod(besteffort("metered"))
            k.start_pod(guaranteed("metered-excl"))
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            k.delete_all_pods()
        assert 'cri_resmgr_policy_active{policy="static"} 1.0' in text
        assert "cri_resmgr_policy_decisions_total 2.0" in text
        assert "cri_resmgr_containers 2.0" in text
        assert "cri_resmgr_requests_not_met_total" in text
        # Health on the same address: the runtime answers Version and the policy is in force.
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read() == b"ok\n"
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).read() == b"ready\n"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=5)
        assert e.value.code == 404
        probe = subprocess.run([*relay.command()[:3], "-probe", "-metrics-address", f":{port}"],
                               capture_output=True, text=True, timeout=30)
        assert probe.returncode == 0 and probe.stdout.strip() == "ready", probe
    finally:
        relay.stop()
    probe = subprocess.run([*relay.command()[:3], "-probe", "-metrics-address", f"127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=30)
    assert probe.returncode == 1 and "not ready: relay not reachable" in probe.stderr, probe


def test_container_removed_at_containerd_returns_its_cpu_within_the_reconcile_period(
        containerd, cgroup_root, workdir):
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-reconcile-period", "2"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    direct = Kubelet(containerd.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        a = k.start_pod(besteffort("stays")).container_ids["c"]
        g = k.start_pod(guaranteed("removed-behind")).container_ids["c"]
        exclusive = CPUSet(cpuset_of(k, g))
        wait_cpuset(k, a, str(ONLINE - exclusive))
        # crictl stop + rm, straight at containerd: the relay sees none of it.
        direct.stop_container(g)
        direct.remove_container(g)
        wait_cpuset(k, a, ALL, timeout=2 + 8)  # the period, and time for the update to land
        assert "default/removed-behind:c" in relay.log() and "removed behind the relay's back" in relay.log()
        wait_state(relay, lambda st: all(v["exclusive"] == "" for v in st["assignments"].values()))
    finally:
        direct.close()
        k.delete_all_pods()
        k.close()
        relay.stop()


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_pod_with_256k_of_annotations_starts_through_the_static_policy(containerd, cgroup_root, workdir, transport):
    """Kubernetes allows 256 KiB of annotations (kubectl's last-applied-configuration
    is often large): RunPodSandbox and CreateContainer carry them, intercepted, past
    every flow-control window."""
    cfg = _config(workdir, STATIC)
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-relay-transport", transport]).start()
    try:
        with Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods", rpc_timeout=20) as k:
            pod = guaranteed("annotated")
            pod.annotations["kubectl.kubernetes.io/last-applied-configuration"] = "a" * (256 << 10)
            h = k.start_pod(pod)
            wait_cpuset(k, h.container_ids["c"], EXCLUSIVE or ALL)
            [sandbox] = [p for p in k.list_pods() if p.id == h.sandbox_id]
            assert len(sandbox.annotations["kubectl.kubernetes.io/last-applied-configuration"]) == 256 << 10
            k.delete_pod(h)
    finally:
        relay.stop()
