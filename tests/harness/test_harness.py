"""The real-runtime harness: throwaway containerd, test images, kubelet-like driver.

The first part checks what the driver derives (no runtime needed); the rest
runs real pods on the session's containerd and reads back the cgroup files
runc wrote.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import grpc
import pytest

from tests.harness import cgroupfs, images
from tests.harness.containerd import Containerd, ContainerdError, teardown
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import (
    BESTEFFORT,
    BURSTABLE,
    GUARANTEED,
    PodSpec,
    container_resources,
    pod_cgroup_parent,
    qos_class,
)

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20
GiB = 1 << 30


def pod(name: str, *containers: dict, **extra) -> PodSpec:
    return PodSpec.from_dict({"name": name, "containers": list(containers), **extra})


GUARANTEED_POD = {"name": "g", "containers": [
    {"name": "c0", "requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}]}


# --- derivation, no runtime ------------------------------------------------


def test_qos_class_follows_kubernetes_rules() -> None:
    assert qos_class(PodSpec.from_dict(GUARANTEED_POD)) == GUARANTEED
    # Limits alone: the API server defaults requests to them.
    assert qos_class(pod("p", {"name": "c", "limits": {"cpu": "500m", "memory": "1Gi"}})) == GUARANTEED
    assert qos_class(pod("p", {"name": "c", "requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}})) == BURSTABLE
    # Every container needs both limits.
    assert qos_class(pod(
        "p",
        {"name": "a", "limits": {"cpu": "1", "memory": "1Gi"}},
        {"name": "b", "limits": {"cpu": "1"}},
    )) == BURSTABLE
    assert qos_class(pod("p", {"name": "c", "requests": {"memory": "1Mi"}})) == BURSTABLE
    assert qos_class(pod("p", {"name": "c"})) == BESTEFFORT


def test_container_resources_as_kubelet_derives_them() -> None:
    g = PodSpec.from_dict(GUARANTEED_POD)
    r = container_resources(g, g.containers[0], memory_capacity=GiB)
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes, r.oom_score_adj) == (
        1024, 100000, 100000, 64 * MiB, -997)

    b = pod("b", {"name": "c", "requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}})
    r = container_resources(b, b.containers[0], memory_capacity=GiB)
    assert (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes) == (256, 0, 128 * MiB)
    assert r.oom_score_adj == 1000 - (1000 * 32 * MiB) // GiB

    tiny = pod("t", {"name": "c", "requests": {"cpu": "1m"}, "limits": {"cpu": "1m"}})
    r = container_resources(tiny, tiny.containers[0], memory_capacity=GiB)
    assert (r.cpu_shares, r.cpu_quota) == (2, 1000)  # kubelet's minimums

    # Burstable clamps: never as low as guaranteed, never 1000 (besteffort's).
    huge = pod("h", {"name": "c", "requests": {"memory": "2Gi"}})
    assert container_resources(huge, huge.containers[0], memory_capacity=GiB).oom_score_adj == 3
    cpu_only = pod("o", {"name": "c", "requests": {"cpu": "100m"}})
    assert container_resources(cpu_only, cpu_only.containers[0], memory_capacity=GiB).oom_score_adj == 999

    be = pod("e", {"name": "c"})
    r = container_resources(be, be.containers[0], memory_capacity=GiB)
    assert (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes, r.oom_score_adj) == (2, 0, 0, 1000)


def test_cgroup_parent_by_qos_class_under_configurable_root() -> None:
    g = PodSpec.from_dict({**GUARANTEED_POD, "uid": "u1"})
    assert pod_cgroup_parent(g) == "/kubepods/podu1"
    assert pod_cgroup_parent(g, "/crirm-test-x/kubepods/") == "/crirm-test-x/kubepods/podu1"
    b = pod("b", {"name": "c", "requests": {"cpu": "1"}}, uid="u2")
    assert pod_cgroup_parent(b) == "/kubepods/burstable/podu2"
    assert pod_cgroup_parent(pod("e", {"name": "c"}, uid="u3")) == "/kubepods/besteffort/podu3"


def test_pod_manifest_form_is_accepted() -> None:
    spec = PodSpec.from_dict({
        "metadata": {"name": "m", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
        "spec": {"hostNetwork": True, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2", "memory": "1G"}}}]},
    })
    assert (spec.name, spec.namespace, spec.uid, spec.labels) == ("m", "ns", "u", {"app": "x"})
    assert spec.containers[0].request_values() == {"cpu": 2000, "memory": 10**9}


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"name": "p", "containers": [{"name": "c", "requests": {"cpu": "1.5.2"}}]}, "'1.5.2'"),
        ({"name": "p", "containers": [{"name": "c", "limits": {"memory": "64MB"}}]}, "'64MB'"),
        ({"name": "p", "containers": [{"name": "c", "cpus": "1"}]}, "cpus"),
        ({"name": "p", "containers": [{"name": "c"}, {"name": "c"}]}, "duplicate"),
        ({"name": "p", "containers": []}, "no containers"),
        ({"name": "p", "hostnetwork": True, "containers": [{"name": "c"}]}, "hostnetwork"),
    ],
)
def test_bad_pod_specs_are_rejected_naming_the_problem(bad: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace(".", r"\.")):
        PodSpec.from_dict(bad)


def test_bad_quantity_error_names_container_and_field() -> None:
    with pytest.raises(ValueError, match=r"container 'web': limits.cpu: .*'x1'"):
        PodSpec.from_dict({"name": "p", "containers": [{"name": "web", "limits": {"cpu": "x1"}}]})


def test_driver_rejects_unknown_api_version() -> None:
    with pytest.raises(ValueError, match="'v2'"):
        Kubelet("/nonexistent.sock", api_version="v2")


def test_sandbox_and_container_configs_carry_what_kubelet_sends() -> None:
    with Kubelet("/nonexistent.sock", cgroup_root="/r/kubepods", memory_capacity=GiB) as k:
        spec = PodSpec.from_dict({**GUARANTEED_POD, "uid": "u", "namespace": "ns", "annotations": {"a": "b"}})
        sandbox = k.pod_sandbox_config(spec)
        assert sandbox.hostname == ""  # host network: runc refuses a hostname
        assert sandbox.linux.security_context.namespace_options.network == k.pb.NamespaceMode.Value("NODE")
        assert sandbox.linux.cgroup_parent == "/r/kubepods/podu"
        assert sandbox.labels == {
            "io.kubernetes.pod.name": "g", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": "u"}
        assert sandbox.annotations["a"] == "b"
        assert sandbox.log_directory.endswith("/ns_g_u")
        assert (sandbox.metadata.name, sandbox.metadata.namespace, sandbox.metadata.uid) == ("g", "ns", "u")
        assert sandbox.linux.resources.cpu_quota == 100000

        container = k.container_config(spec, "c0")
        assert container.labels["io.kubernetes.container.name"] == "c0"
        assert container.labels["io.kubernetes.pod.uid"] == "u"
        assert container.annotations["io.kubernetes.container.restartCount"] == "0"
        assert container.log_path == "c0/0.log"
        assert container.linux.resources.oom_score_adj == -997
        assert container.image.image == images.BUSYBOX_IMAGE


def test_images_tarball_is_a_valid_cached_oci_layout(tmp_path: Path) -> None:
    first = images.ensure_images_tar(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert images.ensure_images_tar(tmp_path) == first and first.stat().st_mtime_ns == mtime  # not rebuilt
    with tarfile.open(first) as tar:
        index = json.load(tar.extractfile("index.json"))
        blob = lambda digest: tar.extractfile("blobs/sha256/" + digest.split(":")[1]).read()  # noqa: E731
        names = {m["annotations"]["io.containerd.image.name"] for m in index["manifests"]}
        assert names == {images.BUSYBOX_IMAGE, images.PAUSE_IMAGE}
        for m in index["manifests"]:
            manifest = json.loads(blob(m["digest"]))
            config = json.loads(blob(manifest["config"]["digest"]))
            layer = blob(manifest["layers"][0]["digest"])
            # diff_id is the digest of the uncompressed layer tar.
            assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
            with tarfile.open(fileobj=io.BytesIO(layer)) as layer_tar:
                members = {t.name: t for t in layer_tar.getmembers()}
            assert members["bin/busybox"].isfile()
            assert members["bin/sh"].issym() and members["bin/sleep"].issym()
            assert {"proc", "sys", "dev", "etc", "tmp"} <= set(members)


def test_images_need_busybox(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        images.ensure_images_tar(tmp_path, busybox=tmp_path / "nope")


def test_instance_dir_must_fit_a_socket_path() -> None:
    with pytest.raises(ValueError, match="too long"):
        Containerd(Path("/tmp/" + "x" * 120))


def test_system_containerd_paths_are_refused() -> None:
    for path in ("/var/lib/containerd", "/run/containerd", "/"):
        with pytest.raises(ValueError, match="refusing"):
            Containerd(Path(path))


def test_teardown_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious").write_text("keep me")
    with pytest.raises(ContainerdError, match="not touching"):
        teardown(tmp_path)
    assert (tmp_path / "precious").read_text() == "keep me"


# --- real pods on the session containerd ------------------------------------


def _running(k: Kubelet, cid: str) -> bool:
    return k.container_status(cid).status.state == k.pb.ContainerState.Value("CONTAINER_RUNNING")


def test_guaranteed_pod_full_lifecycle(kubelet: Kubelet, cgroup_root: str) -> None:
    k = kubelet
    spec = PodSpec.from_dict(GUARANTEED_POD)
    sandbox_id = k.run_pod(spec)
    assert [p.id for p in k.list_pods()] == [sandbox_id]
    cid = k.create_container(spec, sandbox_id, "c0")
    k.start_container(cid)
    assert _running(k, cid)
    [listed] = k.list_containers(sandbox_id=sandbox_id)
    assert listed.labels["io.kubernetes.container.name"] == "c0"

    files = k.cgroup_files(cid)
    assert str(files.dirs["cpu"]).endswith(f"{cgroup_root}/kubepods/pod{spec.uid}/{cid}")
    assert files.cpu_shares() == 1024
    assert (files.cfs_quota_us(), files.cfs_period_us()) == (100000, 100000)
    assert files.memory_limit_in_bytes() == 64 * MiB
    assert cgroupfs.cpus_allowed_list(files.pid) == files.cpuset_cpus()

    k.stop_container(cid)
    status = k.container_status(cid).status
    assert status.state == k.pb.ContainerState.Value("CONTAINER_EXITED")
    assert status.exit_code == 0  # the default command exits on SIGTERM
    k.remove_container(cid)
    k.stop_pod(sandbox_id)
    k.remove_pod(sandbox_id)
    assert k.list_pods() == [] and k.list_containers() == []
    with pytest.raises(grpc.RpcError) as err:
        k.container_status(cid)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_burstable_pod_with_explicit_cpuset(kubelet: Kubelet, cgroup_root: str) -> None:
    k = kubelet
    handle = k.start_pod({"name": "b", "containers": [
        {"name": "pinned", "requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"memory": "128Mi"},
         "cpuset_cpus": "0"},
        {"name": "capped", "requests": {"cpu": "100m"}, "limits": {"cpu": "1500m"}},
    ]})
    pinned = k.cgroup_files(handle.container_ids["pinned"])
    assert f"{cgroup_root}/kubepods/burstable/pod{handle.spec.uid}/" in str(pinned.dirs["cpu"])
    assert (pinned.cpu_shares(), pinned.cfs_quota_us()) == (256, -1)
    assert pinned.memory_limit_in_bytes() == 128 * MiB
    assert pinned.cpuset_cpus() == "0"
    assert cgroupfs.cpus_allowed_list(pinned.pid) == "0"
    # Positive scores are applied as asked (only lowering needs CAP_SYS_RESOURCE).
    expected = 1000 - (1000 * 32 * MiB) // k.memory_capacity
    assert Path(f"/proc/{pinned.pid}/oom_score_adj").read_text().strip() == str(expected)

    capped = k.cgroup_files(handle.container_ids["capped"])
    assert (capped.cpu_shares(), capped.cfs_quota_us()) == (102, 150000)

    k.delete_pod(handle)
    assert k.list_pods() == []
    assert cgroupfs.cgroup_dirs(f"{cgroup_root}/kubepods/burstable/pod{handle.spec.uid}") == []


def test_besteffort_pod(kubelet: Kubelet, cgroup_root: str) -> None:
    handle = kubelet.start_pod({"name": "e", "containers": [{"name": "c"}]})
    files = kubelet.cgroup_files(handle.container_ids["c"])
    assert f"{cgroup_root}/kubepods/besteffort/pod{handle.spec.uid}/" in str(files.dirs["memory"])
    assert (files.cpu_shares(), files.cfs_quota_us()) == (2, -1)
    assert files.memory_limit_in_bytes() >= 1 << 62  # unlimited
    assert Path(f"/proc/{files.pid}/oom_score_adj").read_text().strip() == "1000"


def test_v1alpha2_api(containerd: Containerd, cgroup_root: str) -> None:
    with Kubelet(containerd.address, api_version="v1alpha2", cgroup_root=f"{cgroup_root}/kubepods") as k:
        assert k.version().runtime_api_version == "v1alpha2"
        handle = k.start_pod(GUARANTEED_POD)
        try:
            assert _running(k, handle.container_ids["c0"])
            assert k.cgroup_files(handle.container_ids["c0"]).cpu_shares() == 1024
        finally:
            k.delete_pod(handle)
        assert k.list_pods() == []


def test_failed_start_pod_cleans_up_and_reports_the_image(kubelet: Kubelet) -> None:
    with pytest.raises(grpc.RpcError) as err:
        kubelet.start_pod({"name": "x", "containers": [{"name": "c", "image": "localhost/missing:latest"}]})
    assert "localhost/missing:latest" in err.value.details()
    assert kubelet.list_pods() == []


# --- separate instances: restart and teardown --------------------------------


def test_restart_keeps_running_containers(make_containerd) -> None:
    instance = make_containerd()
    root = instance.owned_cgroup_roots[0]
    with Kubelet(instance.address, cgroup_root=f"{root}/kubepods") as k:
        handle = k.start_pod(GUARANTEED_POD)
        cid = handle.container_ids["c0"]
        pid = k.container_pid(cid)
        old_daemon = instance.pid
        instance.restart()
        assert instance.pid != old_daemon
        assert _running(k, cid) and k.container_pid(cid) == pid
        k.delete_pod(handle)
        assert k.list_pods() == []


def test_pod_network_without_cni_fails_and_the_sandbox_sticks(make_containerd) -> None:
    # Why the driver defaults to host network: containerd 1.6 without CNI
    # fails RunPodSandbox, keeps the sandbox, and cannot stop it either.  A
    # separate instance, since the sandbox stays until teardown.
    instance = make_containerd()
    with Kubelet(instance.address, cgroup_root=f"{instance.owned_cgroup_roots[0]}/kubepods") as k:
        with pytest.raises(grpc.RpcError) as err:
            k.start_pod({"name": "net", "host_network": False, "containers": [{"name": "c"}]})
        assert "cni plugin not initialized" in err.value.details()
        [stuck] = k.list_pods()
        assert stuck.state == k.pb.PodSandboxState.Value("SANDBOX_NOTREADY")
    instance.stop()
    assert not instance.base_dir.exists()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_stop_leaves_nothing_behind(make_containerd) -> None:
    instance = make_containerd()
    base, root = instance.base_dir, instance.owned_cgroup_roots[0]
    with Kubelet(instance.address, cgroup_root=f"{root}/kubepods") as k:
        handles = [k.start_pod(GUARANTEED_POD), k.start_pod({"name": "e", "containers": [{"name": "c"}]})]
        container_pids = [k.container_pid(cid) for h in handles for cid in h.container_ids.values()]
    shim_pids = instance.shim_pids()
    shim_sockets = [
        Path(f.read_text().strip().removeprefix("unix://"))
        for f in base.glob("state/io.containerd.runtime.v2.task/*/*/address")
    ]
    assert shim_pids and shim_sockets and instance.mounts() and cgroupfs.cgroup_dirs(root)

    instance.stop()  # pods still running: teardown must handle them

    assert not base.exists()
    assert instance.mounts() == []
    assert not any(_alive(p) for p in container_pids + shim_pids)
    assert [p for p in _processes_mentioning(str(base)) if _alive(p)] == []
    assert not any(s.exists() for s in shim_sockets)
    assert cgroupfs.cgroup_dirs(root) == []
    instance.stop()  # idempotent


def test_owned_cgroup_roots_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="'relative'"):
        Containerd(Path("/tmp/crirm-bad"), owned_cgroup_roots=["relative"])


def test_start_refuses_a_running_instance(make_containerd) -> None:
    instance = make_containerd()
    with pytest.raises(ContainerdError, match="already running"):
        instance.start()
    assert instance.is_running()


def test_up_and_down_scripts(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("containerd"):
        pytest.skip("needs root and containerd")
    base = Path(tempfile.mkdtemp(prefix="crirm-cli-", dir="/tmp"))
    root = f"/crirm-test-{secrets.token_hex(4)}"
    try:
        up = subprocess.run(
            ["bash", str(REPO / "scripts/containerd-up.sh"), str(base), "--cgroup-root", root],
            capture_output=True, text=True, timeout=120,
        )
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == str(base / "containerd.sock")
        with Kubelet(up.stdout.strip(), cgroup_root=f"{root}/kubepods") as k:
            k.start_pod({"name": "cli", "containers": [{"name": "c"}]})  # left running on purpose
            assert cgroupfs.cgroup_dirs(root)
    finally:
        down = subprocess.run(
            ["bash", str(REPO / "scripts/containerd-down.sh"), str(base)], capture_output=True, text=True, timeout=120
        )
    assert down.returncode == 0, down.stderr
    assert not base.exists()
    assert cgroupfs.cgroup_dirs(root) == []
    # A second down is a no-op, and down refuses what is not an instance dir.
    again = subprocess.run(["bash", str(REPO / "scripts/containerd-down.sh"), str(base)], capture_output=True, text=True)
    assert again.returncode == 0
    refused = subprocess.run(
        ["bash", str(REPO / "scripts/containerd-down.sh"), str(tmp_path)], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "not touching" in refused.stderr
