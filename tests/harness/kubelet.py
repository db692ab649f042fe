"""A kubelet-like CRI client: runs pods and containers the way kubelet asks
for them, over gRPC to any CRI socket (the relay's or containerd's).

Requests carry what kubelet puts in them: its labels and annotations, sandbox
metadata, an empty hostname for host-network pods, a per-pod log directory,
the QoS-class cgroup parent (cgroupfs driver form, under a configurable root)
and LinuxContainerResources derived from requests and limits
(see tests.harness.podspec).

    with Kubelet(containerd.address, cgroup_root="/crirm-test-1/kubepods") as kubelet:
        pod = kubelet.start_pod({"name": "web", "containers": [
            {"name": "c0", "requests": {"cpu": "1", "memory": "64Mi"},
                           "limits": {"cpu": "1", "memory": "64Mi"}}]})
        kubelet.cgroup_files(pod.container_ids["c0"]).cpu_shares()  # 1024
        kubelet.delete_pod(pod)

`kubelet_version="1.36"` makes the calls a kubelet 1.36 makes that older ones do not: at
start it reads its cgroup driver with RuntimeConfig (kubelet does from 1.31; on
UNIMPLEMENTED it keeps its configured one, cgroupfs here), and it lists pods and
containers with StreamPodSandboxes and StreamContainers (KEP-5825, the CRIListStreaming
gate), falling back to ListPodSandbox and ListContainers for good on the first
UNIMPLEMENTED, as kubelet does until it restarts. A stream that fails midway is an
error, its partial list dropped. The driver keeps writing cgroup parents in the form of its
configured `cgroup_driver` (cgroupfs unless told systemd) whatever driver the runtime names.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import weakref
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from cri_resmgr._proto import runtime_v1_pb2, runtime_v1_pb2_grpc, runtime_v1alpha2_pb2, runtime_v1alpha2_pb2_grpc
from tests.harness import cgroupfs
from tests.harness.podspec import (
    DEFAULT_COMMAND,
    ContainerSpec,
    LinuxResources,
    PodSpec,
    as_pod_spec,
    container_resources,
    machine_memory_capacity,
    pod_cgroup_parent,
    qos_class,
    sandbox_resources,
)

# Label keys kubelet sets (pkg/kubelet/types/labels.go).
POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
POD_UID = "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"

# api version -> (messages module, service stubs module)
API_MODULES: dict[str, tuple[ModuleType, ModuleType]] = {
    "v1": (runtime_v1_pb2, runtime_v1_pb2_grpc),
    "v1alpha2": (runtime_v1alpha2_pb2, runtime_v1alpha2_pb2_grpc),
}


KUBELET_MAX_MESSAGE = 16 << 20  # kubelet's grpc.MaxCallRecvMsgSize

@dataclass
class PodHandle:
    """A pod started by `Kubelet.start_pod`."""

    spec: PodSpec
    sandbox_id: str
    container_ids: dict[str, str]  # container name -> container id


def grpc_target(address: str | os.PathLike) -> str:
    """A gRPC target from "unix:///x.sock", "unix:/x.sock" or a plain path."""
    text = os.fspath(address)
    if text.startswith("unix:"):
        return text
    return "unix://" + os.path.abspath(text)


class Kubelet:
    def __init__(
        self,
        address: str | os.PathLike,
        *,
        api_version: str = "v1",
        cgroup_root: str = "/kubepods",
        log_root: Path | None = None,
        memory_capacity: int | None = None,
        stop_timeout: int = 2,
        rpc_timeout: float = 60.0,
        kubelet_version: str = "1.35",
        cgroup_driver: str = "cgroupfs",
    ) -> None:
        if api_version not in API_MODULES:
            raise ValueError(f"unknown CRI api version {api_version!r} (known: {sorted(API_MODULES)})")
        if cgroup_driver not in ("cgroupfs", "systemd"):
            raise ValueError(f"unknown cgroup driver {cgroup_driver!r} (cgroupfs or systemd)")
        if cgroup_driver == "cgroupfs" and not cgroup_root.startswith("/"):
            raise ValueError(f"cgroup_root must be an absolute cgroup path, got {cgroup_root!r}")
        if cgroup_driver == "systemd" and ("/" in cgroup_root.strip("/") or "-" in cgroup_root):
            raise ValueError(f"with the systemd driver cgroup_root is a slice prefix without '/' or '-', "
                             f"got {cgroup_root!r}")
        # The form of the cgroup parents it writes: its configured driver's (a runtime that names
        # another in RuntimeConfig does not change it, below).
        self.cgroup_form = cgroup_driver
        self.api_version = api_version
        self.pb, stubs = API_MODULES[api_version]
        self.cgroup_root = cgroup_root
        self.memory_capacity = memory_capacity or machine_memory_capacity()
        self.stop_timeout = stop_timeout
        self.rpc_timeout = rpc_timeout
        if log_root is None:
            self.log_root = Path(tempfile.mkdtemp(prefix="crirm-kubelet-logs-"))
            # Removed on close(), or when the driver is collected or the
            # interpreter exits, whichever comes first.
            self._remove_log_root = weakref.finalize(self, shutil.rmtree, self.log_root, True)
        else:
            self.log_root = Path(log_root)
            self._remove_log_root = None
        # kubelet's CRI client takes replies of up to 16 MiB (gRPC's default is 4 MiB).
        self.channel = grpc.insecure_channel(grpc_target(address),
                                             options=[("grpc.max_receive_message_length", KUBELET_MAX_MESSAGE)])
        self.runtime = stubs.RuntimeServiceStub(self.channel)
        self.images = stubs.ImageServiceStub(self.channel)
        self.kubelet_version = kubelet_version
        newer = _minor(kubelet_version) >= 36
        # Lists with Stream* (None: not tried yet, False: the runtime said UNIMPLEMENTED).
        self.streams_lists: bool | None = None if newer and api_version == "v1" else False
        # The cgroup driver and where it came from ("runtime": RuntimeConfig, "config": kubelet's own).
        self.cgroup_driver, self.cgroup_driver_from = cgroup_driver, "config"
        if newer and api_version == "v1":
            try:
                self._read_cgroup_driver()
            except BaseException:
                self.close()
                raise

    def _read_cgroup_driver(self) -> None:
        """kubelet's getCgroupDriverFromCRI: RuntimeConfig, its own setting on UNIMPLEMENTED."""
        try:
            reply = self.runtime_config()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            return
        if reply.HasField("linux"):
            self.cgroup_driver = "systemd" if reply.linux.cgroup_driver == self.pb.CgroupDriver.SYSTEMD else "cgroupfs"
            self.cgroup_driver_from = "runtime"

    def close(self) -> None:
        self.channel.close()
        if self._remove_log_root is not None:
            self._remove_log_root()

    def __enter__(self) -> Kubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- request building (no RPC) ---------------------------------------

    def linux_resources(self, values: LinuxResources) -> Any:
        return self.pb.LinuxContainerResources(
            cpu_shares=values.cpu_shares,
            cpu_quota=values.cpu_quota,
            cpu_period=values.cpu_period,
            memory_limit_in_bytes=values.memory_limit_in_bytes,
            oom_score_adj=values.oom_score_adj,
            cpuset_cpus=values.cpuset_cpus,
            cpuset_mems=values.cpuset_mems,
        )

    def pod_log_directory(self, pod: PodSpec) -> Path:
        return self.log_root / f"{pod.namespace}_{pod.name}_{pod.uid}"

    def _namespace_options(self, pod: PodSpec) -> Any:
        mode = self.pb.NamespaceMode
        return self.pb.NamespaceOption(
            network=mode.Value("NODE") if pod.host_network else mode.Value("POD"),
            pid=mode.Value("CONTAINER"),
            ipc=mode.Value("POD"),
        )

    def pod_sandbox_config(self, pod: PodSpec | Mapping[str, Any], attempt: int = 0) -> Any:
        pod = as_pod_spec(pod)
        pb = self.pb
        labels = {**pod.labels, POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, POD_UID: pod.uid}
        # kubelet's config source adds these to every pod it admits.
        annotations = {"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "1970-01-01T00:00:00Z"}
        annotations.update(pod.annotations)
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=pod.name, uid=pod.uid, namespace=pod.namespace, attempt=attempt),
            # runc refuses a hostname for a sandbox in the host's UTS namespace.
            hostname="" if pod.host_network else pod.name,
            log_directory=str(self.pod_log_directory(pod)),
            labels=labels,
            annotations=annotations,
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=pod_cgroup_parent(pod, self.cgroup_root, self.cgroup_form),
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=self._namespace_options(pod)),
                resources=self.linux_resources(sandbox_resources(pod)),
                overhead=pb.LinuxContainerResources(),
            ),
        )

    def container_config(self, pod: PodSpec | Mapping[str, Any], container: ContainerSpec | str, attempt: int = 0) -> Any:
        pod = as_pod_spec(pod)
        spec = pod.container(container) if isinstance(container, str) else container
        pb = self.pb
        labels = {
            **spec.labels,
            POD_NAME: pod.name,
            POD_NAMESPACE: pod.namespace,
            POD_UID: pod.uid,
            CONTAINER_NAME: spec.name,
        }
        annotations = {
            "io.kubernetes.container.hash": _container_hash(spec),
            "io.kubernetes.container.restartCount": str(attempt),
            "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
            "io.kubernetes.container.terminationMessagePolicy": "File",
            "io.kubernetes.pod.terminationGracePeriod": str(pod.termination_grace_period),
            **spec.annotations,
        }
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=spec.name, attempt=attempt),
            image=pb.ImageSpec(image=spec.image),
            command=list(DEFAULT_COMMAND if spec.command is None else spec.command),
            args=list(spec.args),
            envs=[pb.KeyValue(key=k, value=v) for k, v in spec.env.items()],
            labels=labels,
            annotations=annotations,
            log_path=f"{spec.name}/{attempt}.log",
            linux=pb.LinuxContainerConfig(
                resources=self.linux_resources(container_resources(pod, spec, self.memory_capacity)),
                security_context=pb.LinuxContainerSecurityContext(namespace_options=self._namespace_options(pod)),
            ),
        )

    # --- CRI calls ---------------------------------------------------------

    def version(self) -> Any:
        return self.runtime.Version(self.pb.VersionRequest(version=self.api_version), timeout=self.rpc_timeout)

    def run_pod(self, pod: PodSpec | Mapping[str, Any], attempt: int = 0) -> str:
        """RunPodSandbox; returns the sandbox id."""
        pod = as_pod_spec(pod)
        config = self.pod_sandbox_config(pod, attempt)
        # kubelet creates the pod log directory before asking for the sandbox.
        Path(config.log_directory).mkdir(parents=True, exist_ok=True)
        request = self.pb.RunPodSandboxRequest(config=config, runtime_handler=pod.runtime_handler)
        response = self.runtime.RunPodSandbox(request, timeout=self.rpc_timeout)
        return response.pod_sandbox_id

    def create_container(
        self, pod: PodSpec | Mapping[str, Any], sandbox_id: str, container: ContainerSpec | str, attempt: int = 0
    ) -> str:
        """CreateContainer; returns the container id."""
        pod = as_pod_spec(pod)
        config = self.container_config(pod, container, attempt)
        (self.pod_log_directory(pod) / config.metadata.name).mkdir(parents=True, exist_ok=True)
        request = self.pb.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=self.pod_sandbox_config(pod)
        )
        return self.runtime.CreateContainer(request, timeout=self.rpc_timeout).container_id

    def start_container(self, container_id: str) -> None:
        self.runtime.StartContainer(self.pb.StartContainerRequest(container_id=container_id), timeout=self.rpc_timeout)

    def stop_container(self, container_id: str, timeout: int | None = None) -> None:
        stop_timeout = self.stop_timeout if timeout is None else timeout
        request = self.pb.StopContainerRequest(container_id=container_id, timeout=stop_timeout)
        self.runtime.StopContainer(request, timeout=self.rpc_timeout + stop_timeout)

    def remove_container(self, container_id: str) -> None:
        self.runtime.RemoveContainer(self.pb.RemoveContainerRequest(container_id=container_id), timeout=self.rpc_timeout)

    def update_container_resources(self, container_id: str, resources: LinuxResources) -> None:
        request = self.pb.UpdateContainerResourcesRequest(container_id=container_id, linux=self.linux_resources(resources))
        self.runtime.UpdateContainerResources(request, timeout=self.rpc_timeout)

    def update_pod_sandbox_resources(self, sandbox_id: str, resources: LinuxResources,
                                     overhead: LinuxResources | None = None) -> None:
        """UpdatePodSandboxResources (kubelet 1.33+), as kubelet sends it on a pod resize."""
        request = self.pb.UpdatePodSandboxResourcesRequest(
            pod_sandbox_id=sandbox_id, resources=self.linux_resources(resources),
            overhead=self.linux_resources(overhead) if overhead is not None else self.pb.LinuxContainerResources())
        self.runtime.UpdatePodSandboxResources(request, timeout=self.rpc_timeout)

    def resize_pod(self, pod: PodHandle, resources: Mapping[str, Mapping[str, str]] | None = None,
                   containers: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None) -> list[str]:
        """An in-place resize of a running pod as kubelet 1.36 does it (KEP-1287, and
        KEP-5419 for pod-level `resources`): UpdatePodSandboxResources before the pod's
        cgroup grows, after it shrinks, then UpdateContainerResources for each container.
        Any error of UpdatePodSandboxResources but UNIMPLEMENTED (runtimes before it,
        containerd 1.6 and 1.7) blocks the resize: raised, nothing else done. A failure
        after it (a cgroup update, a container's update) is reverted: the pod's cgroup and
        UpdatePodSandboxResources get the old size again, and the failure is raised.
        `containers`: new {"requests", "limits"} by container name. Returns the calls
        made, in order ("UpdatePodSandboxResources", "pod cgroup", "UpdateContainerResources c"...)."""
        old_spec = pod.spec
        wanted = containers or {}
        new_spec = dataclasses.replace(
            old_spec, resources={k: dict(v) for k, v in (resources or old_spec.resources).items()},
            containers=[dataclasses.replace(c, requests=dict(wanted.get(c.name, {}).get("requests", c.requests)),
                                            limits=dict(wanted.get(c.name, {}).get("limits", c.limits)))
                        for c in old_spec.containers])
        old, new = sandbox_resources(old_spec), sandbox_resources(new_spec)
        grows = new.cpu_shares >= old.cpu_shares
        calls: list[str] = []
        cgroup_parent = pod_cgroup_parent(old_spec, self.cgroup_root)

        def sandbox(values: LinuxResources) -> None:
            calls.append("UpdatePodSandboxResources")
            try:
                self.update_pod_sandbox_resources(pod.sandbox_id, values)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
                    raise

        def pod_cgroup(values: LinuxResources) -> None:
            calls.append("pod cgroup")
            _write_pod_cgroup(cgroup_parent, values)

        steps = [lambda: sandbox(new), lambda: pod_cgroup(new)] if grows else [lambda: pod_cgroup(new), lambda: sandbox(new)]
        steps[0]()  # an error here leaves everything as it was
        try:
            steps[1]()
            for c in new_spec.containers:
                cid = pod.container_ids.get(c.name)
                if cid is None:
                    continue
                calls.append(f"UpdateContainerResources {c.name}")
                self.update_container_resources(cid, container_resources(new_spec, c, self.memory_capacity))
        except (grpc.RpcError, OSError):
            calls.append("revert")  # kubelet's revert of a failed resize: the old size again
            try:
                _write_pod_cgroup(cgroup_parent, old)
                self.update_pod_sandbox_resources(pod.sandbox_id, old)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
                    raise
            raise
        pod.spec = new_spec
        return calls

    def stop_pod(self, sandbox_id: str) -> None:
        self.runtime.StopPodSandbox(self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=self.rpc_timeout)

    def remove_pod(self, sandbox_id: str) -> None:
        self.runtime.RemovePodSandbox(self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=self.rpc_timeout)

    def runtime_config(self) -> Any:
        """RuntimeConfigResponse (.linux.cgroup_driver)."""
        return self.runtime.RuntimeConfig(self.pb.RuntimeConfigRequest(), timeout=self.rpc_timeout)

    def list_pods(self, labels: Mapping[str, str] | None = None) -> list[Any]:
        pod_filter = self.pb.PodSandboxFilter(label_selector=dict(labels or {}))
        if self.streams_lists is not False:
            streamed = self._streamed(self.runtime.StreamPodSandboxes,
                                      self.pb.StreamPodSandboxesRequest(filter=pod_filter), "pod_sandboxes")
            if streamed is not None:
                return streamed
        request = self.pb.ListPodSandboxRequest(filter=pod_filter)
        return list(self.runtime.ListPodSandbox(request, timeout=self.rpc_timeout).items)

    def list_containers(self, sandbox_id: str = "", labels: Mapping[str, str] | None = None) -> list[Any]:
        container_filter = self.pb.ContainerFilter(pod_sandbox_id=sandbox_id, label_selector=dict(labels or {}))
        if self.streams_lists is not False:
            streamed = self._streamed(self.runtime.StreamContainers,
                                      self.pb.StreamContainersRequest(filter=container_filter), "containers")
            if streamed is not None:
                return streamed
        request = self.pb.ListContainersRequest(filter=container_filter)
        return list(self.runtime.ListContainers(request, timeout=self.rpc_timeout).containers)

    def _streamed(self, call: Any, request: Any, field: str) -> list[Any] | None:
        """A streamed list, every message's items in order; None (and Stream* given up
        for good) if the runtime answers UNIMPLEMENTED. A stream that fails midway
        raises: kubelet drops what it had and lists again at its next relist."""
        items: list[Any] = []
        try:
            for message in call(request, timeout=self.rpc_timeout):
                items.extend(getattr(message, field))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED or items:
                raise
            self.streams_lists = False
            return None
        self.streams_lists = True
        return items

    def pod_status(self, sandbox_id: str, verbose: bool = False) -> Any:
        """The PodSandboxStatusResponse (.status, and .info when verbose)."""
        request = self.pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=verbose)
        return self.runtime.PodSandboxStatus(request, timeout=self.rpc_timeout)

    def container_status(self, container_id: str, verbose: bool = False) -> Any:
        """The ContainerStatusResponse (.status, and .info when verbose)."""
        request = self.pb.ContainerStatusRequest(container_id=container_id, verbose=verbose)
        return self.runtime.ContainerStatus(request, timeout=self.rpc_timeout)

    def container_info(self, container_id: str) -> dict[str, Any]:
        """containerd's verbose info: {"pid", "runtimeSpec", "sandboxID", ...}."""
        info = self.container_status(container_id, verbose=True).info
        if "info" not in info:
            raise KeyError(f"container {container_id} status has no verbose info (runtime: {self.api_version})")
        return json.loads(info["info"])

    def container_pid(self, container_id: str) -> int:
        pid = int(self.container_info(container_id).get("pid") or 0)
        if pid <= 0:
            raise ValueError(f"container {container_id} has no running process")
        return pid

    def cgroup_files(self, container_id: str) -> cgroupfs.CgroupFiles:
        """The real cgroup directories of a running container's init process."""
        return cgroupfs.cgroup_files_of_pid(self.container_pid(container_id))

    # --- kubelet-level conveniences ------------------------------------------

    def start_pod(self, pod: PodSpec | Mapping[str, Any]) -> PodHandle:
        """RunPodSandbox, then create and start every container, in order."""
        pod = as_pod_spec(pod)
        try:
            sandbox_id = self.run_pod(pod)
        except grpc.RpcError:
            # containerd 1.6 keeps a NOTREADY sandbox after some failures;
            # kubelet's GC would remove it.  Best effort: one whose network
            # setup failed for want of CNI cannot even be stopped ("failed to
            # destroy network ... cni plugin not initialized").
            for leftover in self.list_pods(labels={POD_UID: pod.uid}):
                try:
                    self.delete_pod(leftover.id)
                except grpc.RpcError:
                    pass
            raise
        handle = PodHandle(pod, sandbox_id, {})
        try:
            for c in pod.containers:
                cid = self.create_container(pod, sandbox_id, c)
                handle.container_ids[c.name] = cid
                self.start_container(cid)
        except grpc.RpcError:
            self.delete_pod(handle)
            raise
        return handle

    def delete_pod(self, pod: PodHandle | str) -> None:
        """What kubelet does when a pod goes away: stop and remove its
        containers, stop and remove the sandbox, remove the pod cgroup."""
        sandbox_id = pod.sandbox_id if isinstance(pod, PodHandle) else pod
        cgroup_parent = self._sandbox_cgroup_parent(sandbox_id)
        for c in self.list_containers(sandbox_id=sandbox_id):
            self.stop_container(c.id)
            self.remove_container(c.id)
        self.stop_pod(sandbox_id)
        self.remove_pod(sandbox_id)
        if cgroup_parent and self.cgroup_form == "cgroupfs":  # systemd removes an empty slice itself
            for d in cgroupfs.cgroup_dirs(cgroup_parent):
                cgroupfs.remove_cgroup_tree(d, busy_timeout=1.0)

    def delete_all_pods(self) -> int:
        """delete_pod for every sandbox the runtime lists; returns how many."""
        pods = self.list_pods()
        for p in pods:
            self.delete_pod(p.id)
        return len(pods)

    def _sandbox_cgroup_parent(self, sandbox_id: str) -> str:
        # The cgroup parent is not in PodSandboxStatus; containerd's verbose
        # info carries the config kubelet sent.
        try:
            info = self.pod_status(sandbox_id, verbose=True).info
            config = json.loads(info.get("info", "{}")).get("config", {})
            return config.get("linux", {}).get("cgroup_parent", "")
        except (grpc.RpcError, ValueError):
            return ""


def _write_pod_cgroup(cgroup_parent: str, values: LinuxResources) -> None:
    """What kubelet writes into a pod's cgroup on a resize (cgroup v1 cpu controller;
    nothing where the runtime made no such directory)."""
    for d in cgroupfs.cgroup_dirs(cgroup_parent):
        if (d / "cpu.shares").exists():
            (d / "cpu.shares").write_text(str(values.cpu_shares))
            (d / "cpu.cfs_quota_us").write_text(str(values.cpu_quota or -1))


def _minor(version: str) -> int:
    major, _, minor = version.partition(".")
    if major != "1" or not minor.split(".")[0].isdigit():
        raise ValueError(f"kubelet_version must be 1.N, got {version!r}")
    return int(minor.split(".")[0])


def _container_hash(spec: ContainerSpec) -> str:
    # kubelet hashes the container spec to notice changes; any stable digest of
    # the spec serves the same purpose here.
    return format(zlib.crc32(repr(sorted(vars(spec).items())).encode()), "x")


__all__ = [
    "API_MODULES",
    "CONTAINER_NAME",
    "POD_NAME",
    "POD_NAMESPACE",
    "POD_UID",
    "ContainerSpec",
    "Kubelet",
    "LinuxResources",
    "PodHandle",
    "PodSpec",
    "grpc_target",
    "qos_class",
]
