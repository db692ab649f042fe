"""Pods as kubelet hands them to the runtime: the CRI calls, with made-up replies.

What kubelet derives from a pod spec (pkg/kubelet/kuberuntime, pkg/kubelet/qos,
pkg/kubelet/cm) after the API server's defaulting of a missing request to its
limit: the QoS class, the pod's cgroup parent (cgroupfs form), and per container
cpu shares, quota and period and the memory limit. The webhook's
`intel.com/resources` annotation is not added: a pod that carries it passes it on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.resize import milli_cpu_to_shares
from cri_resmgr.simulate.calls import Call

__all__ = ["Container", "Pod", "Resize", "Ids", "start_calls", "delete_calls", "resize_call", "qos_class"]

QUOTA_PERIOD, MIN_QUOTA = 100000, 1000
POD_NAME, POD_NAMESPACE, POD_UID = "io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid"
CONTAINER_NAME = "io.kubernetes.container.name"
EXITED = pb.ContainerState.CONTAINER_EXITED


@dataclass(frozen=True)
class Container:
    name: str
    requests: Mapping[str, int] = field(default_factory=dict)  # "cpu": milli-CPU, "memory": bytes
    limits: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def request(self, key: str) -> int | None:
        """After defaulting: a missing request equals the limit."""
        value = self.requests.get(key)
        return value if value is not None else self.limits.get(key)


@dataclass(frozen=True)
class Pod:
    name: str
    containers: tuple[Container, ...]
    namespace: str = "default"
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    init_containers: tuple[Container, ...] = ()

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Resize:
    """An in-place resize of one container of a pod started before: its new requests
    and limits, as kubelet forwards them (UpdateContainerResources)."""

    pod: str
    namespace: str
    container: str
    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}:{self.container}"

    def applied(self, pod: Pod) -> Pod:
        """`pod` with the container's new sizes."""
        def new(c: Container) -> Container:
            if c.name != self.container:
                return c
            return Container(c.name, dict(self.requests), dict(self.limits), c.labels, c.annotations)
        return Pod(pod.name, tuple(new(c) for c in pod.containers), pod.namespace, pod.uid, pod.labels,
                   pod.annotations, pod.init_containers)


class Ids:
    """The runtime's ids, made up: readable and unique within one simulation."""

    def __init__(self) -> None:
        self._next = 0

    def new(self, kind: str) -> str:
        self._next += 1
        return f"sim-{kind[0]}-{self._next:06d}"


def qos_class(pod: Pod) -> str:
    """Kubernetes GetPodQOS for cpu and memory, init containers included."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in pod.containers + pod.init_containers:
        for key in ("cpu", "memory"):
            r, lim = c.request(key), c.limits.get(key)
            if r:
                requests[key] = requests.get(key, 0) + r
            if lim:
                limits[key] = limits.get(key, 0) + lim
            else:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


def cgroup_parent(pod: Pod, qos: str) -> str:
    uid = pod.uid or f"{pod.namespace}-{pod.name}"
    return f"/kubepods/pod{uid}" if qos == "Guaranteed" else f"/kubepods/{qos.lower()}/pod{uid}"


def linux_resources(c: Container) -> pb.LinuxContainerResources:
    cpu_request, cpu_limit = c.requests.get("cpu"), c.limits.get("cpu", 0)
    milli = cpu_limit if cpu_request is None and cpu_limit else (cpu_request or 0)
    shares = milli_cpu_to_shares(milli)  # kubelet's conversion, as the engine reads it back
    quota = max(cpu_limit * QUOTA_PERIOD // 1000, MIN_QUOTA) if cpu_limit else 0
    return pb.LinuxContainerResources(cpu_shares=shares, cpu_quota=quota, cpu_period=QUOTA_PERIOD,
                                      memory_limit_in_bytes=c.limits.get("memory", 0))


def sandbox_config(pod: Pod) -> pb.PodSandboxConfig:
    uid = pod.uid or f"{pod.namespace}-{pod.name}"
    return pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name=pod.name, uid=uid, namespace=pod.namespace),
        labels={**pod.labels, POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, POD_UID: uid},
        annotations=dict(pod.annotations),
        linux=pb.LinuxPodSandboxConfig(cgroup_parent=cgroup_parent(pod, qos_class(pod))))


def container_config(pod: Pod, c: Container) -> pb.ContainerConfig:
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=c.name), image=pb.ImageSpec(image="simulated"),
        labels={**c.labels, POD_NAME: pod.name, POD_NAMESPACE: pod.namespace, CONTAINER_NAME: c.name},
        annotations=dict(c.annotations), linux=pb.LinuxContainerConfig(resources=linux_resources(c)))


@dataclass
class Started:
    """A pod the calls started: its sandbox id and container ids, init containers first."""

    pod: Pod
    sandbox_id: str
    container_ids: list[str]


def start_calls(pod: Pod, ids: Ids, where: str) -> tuple[list[Call], Started]:
    """RunPodSandbox; each init container created, started and seen exited; then the containers."""
    sandbox = sandbox_config(pod)
    pod_id = ids.new("pod")
    calls = [Call("RunPodSandbox", pb.RunPodSandboxRequest(config=sandbox),
                  pb.RunPodSandboxResponse(pod_sandbox_id=pod_id), where)]
    started = Started(pod, pod_id, [])
    for c, init in [(c, True) for c in pod.init_containers] + [(c, False) for c in pod.containers]:
        cid = ids.new("ctr")
        started.container_ids.append(cid)
        calls += [
            Call("CreateContainer", pb.CreateContainerRequest(pod_sandbox_id=pod_id, config=container_config(pod, c),
                                                               sandbox_config=sandbox),
                 pb.CreateContainerResponse(container_id=cid), f"{where}:{c.name}"),
            Call("StartContainer", pb.StartContainerRequest(container_id=cid), pb.StartContainerResponse(),
                 f"{where}:{c.name}")]
        if init:  # kubelet learns that an init container finished from its status
            calls.append(Call("ContainerStatus", pb.ContainerStatusRequest(container_id=cid),
                              pb.ContainerStatusResponse(status=pb.ContainerStatus(id=cid, state=EXITED)),
                              f"{where}:{c.name}"))
    return calls, started


def delete_calls(started: Started, where: str) -> Iterator[Call]:
    """As kubelet deletes a pod: stop its containers and sandbox, then remove them."""
    for cid in started.container_ids:
        yield Call("StopContainer", pb.StopContainerRequest(container_id=cid), pb.StopContainerResponse(), where)
    yield Call("StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=started.sandbox_id),
               pb.StopPodSandboxResponse(), where)
    for cid in started.container_ids:
        yield Call("RemoveContainer", pb.RemoveContainerRequest(container_id=cid), pb.RemoveContainerResponse(),
                   where)
    yield Call("RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=started.sandbox_id),
               pb.RemovePodSandboxResponse(), where)


def resize_call(started: Started, resize: Resize, where: str) -> tuple[Call, Started]:
    """kubelet's UpdateContainerResources for an in-place resize (the pod's QoS class
    stays: Kubernetes refuses a resize that would change it), and the pod as it is after."""
    names = [c.name for c in started.pod.init_containers + started.pod.containers]
    index = names.index(resize.container)
    pod = resize.applied(started.pod)
    container = next(c for c in pod.containers if c.name == resize.container)
    call = Call("UpdateContainerResources",
                pb.UpdateContainerResourcesRequest(container_id=started.container_ids[index],
                                                   linux=linux_resources(container)),
                pb.UpdateContainerResourcesResponse(), where)
    return call, Started(pod, started.sandbox_id, started.container_ids)
