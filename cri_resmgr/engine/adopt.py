"""Start-up adoption: learn the runtime's pods and containers before serving,
and reconcile them with the saved state (new ones added, vanished ones dropped)."""

from __future__ import annotations

import json
import logging

from google.protobuf import json_format

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.bounded import clip
from cri_resmgr.engine import classify
from cri_resmgr.engine.cache import Cache, ContainerRecord, PodRecord
from cri_resmgr.engine.runtime import RuntimeCalls, listing_complete

log = logging.getLogger(__name__)

V1 = "/runtime.v1.RuntimeService/"
CRIO_CGROUP_PARENT = "io.kubernetes.cri-o.CgroupParent"


def cgroup_parent_from_info(info: dict[str, str]) -> str:
    """containerd: info.config.linux.cgroup_parent; CRI-O: a runtime spec annotation."""
    try:
        data = json.loads(info.get("info", "{}"))
    except json.JSONDecodeError:
        return ""
    parent = ((data.get("config") or {}).get("linux") or {}).get("cgroup_parent")
    if parent:
        return str(parent)
    spec = data.get("runtimeSpec") or {}
    parent = (spec.get("annotations") or {}).get(CRIO_CGROUP_PARENT)
    return str(parent or "")


def resources_from_info(info: dict[str, str]) -> pb.LinuxContainerResources:
    """The container's resources as its OCI runtime spec holds them."""
    try:
        data = json.loads(info.get("info", "{}"))
    except json.JSONDecodeError:
        return pb.LinuxContainerResources()
    r = (((data.get("runtimeSpec") or {}).get("linux") or {}).get("resources") or {})
    cpu, mem = r.get("cpu") or {}, r.get("memory") or {}
    return pb.LinuxContainerResources(
        cpu_period=int(cpu.get("period") or 0), cpu_quota=max(int(cpu.get("quota") or 0), 0),
        cpu_shares=int(cpu.get("shares") or 0), memory_limit_in_bytes=max(int(mem.get("limit") or 0), 0),
        cpuset_cpus=str(cpu.get("cpus") or ""), cpuset_mems=str(cpu.get("mems") or ""))


async def adopt(upstream: RuntimeCalls, cache: Cache, reserved_namespaces: tuple[str, ...]) -> dict[str, int]:
    """Fills `cache` (which may hold saved state) from the runtime; returns counts. From
    a partial listing (`listing_complete`) nothing saved is dropped: what it does not
    name is kept as saved until an event or a later listing tells."""
    complete = listing_complete(upstream)
    live_pods = await _live_pods(upstream, cache)
    cache.set_pods(live_pods if complete else {**cache.pods, **live_pods})
    listed = await upstream.call(V1 + "ListContainers", pb.ListContainersRequest(),
                                 pb.ListContainersResponse)
    seen: set[str] = set()
    added = kept = 0
    for c in listed.containers:
        if c.state == pb.ContainerState.CONTAINER_EXITED or c.pod_sandbox_id not in live_pods:
            continue
        seen.add(c.id)
        record = cache.by_id(c.id)
        if record is not None:
            record.state = _state(c)
            record.released = False
            kept += 1
            continue
        try:
            record = await _new_container(upstream, c, live_pods[c.pod_sandbox_id], reserved_namespaces)
        except Exception as e:  # one container the runtime cannot tell about must not stop the start
            log.warning("cannot read container %s (%s) from the runtime (%s: %s): skipped; the periodic "
                        "reconcile adopts it", c.metadata.name, c.id[:12], type(e).__name__, clip(str(e), 160))
            seen.discard(c.id)
            continue
        cache.add_container(record)
        added += 1
    vanished = [r for r in cache if r.id not in seen] if complete else []
    for r in vanished:
        log.info("%s (%s) is gone from the runtime: dropped", r.workload, r.id[:12] or "never created")
        cache.remove_container(r.key)
    counts = {"pods": len(live_pods), "kept": kept, "added": added, "vanished": len(vanished)}
    if not complete:
        log.info("the runtime's listing is partial: %d saved containers kept as saved until the runtime "
                 "names them", sum(1 for r in cache if r.id not in seen))
    log.info("discovered %d pod%s; containers: %d known from the saved state, %d adopted (new to the relay), "
             "%d gone since the last run", counts["pods"], "" if counts["pods"] == 1 else "s", kept, added,
             len(vanished))
    return counts


async def unknown_containers(upstream: RuntimeCalls, cache: Cache, containers: list[pb.Container],
                             reserved_namespaces: tuple[str, ...]) -> list[ContainerRecord]:
    """Records for running containers the cache does not know (the periodic reconcile),
    built as at start-up; a pod the cache does not know either is asked for once."""
    records = []
    for c in containers:
        pod = cache.pods.get(c.pod_sandbox_id)
        if pod is None:
            status = await upstream.call(V1 + "PodSandboxStatus",
                                         pb.PodSandboxStatusRequest(pod_sandbox_id=c.pod_sandbox_id, verbose=True),
                                         pb.PodSandboxStatusResponse)
            if status.status.state != pb.PodSandboxState.SANDBOX_READY:
                continue
            meta = status.status.metadata
            pod = PodRecord(id=c.pod_sandbox_id, name=meta.name, namespace=meta.namespace, uid=meta.uid,
                            cgroup_parent=cgroup_parent_from_info(dict(status.info)),
                            annotations=dict(status.status.annotations), labels=dict(status.status.labels))
            cache.add_pod(pod)
        records.append(await _new_container(upstream, c, pod, reserved_namespaces))
    return records


async def _live_pods(upstream: RuntimeCalls, cache: Cache) -> dict[str, PodRecord]:
    """The runtime's ready pods; the saved record of each is kept when it has its cgroup parent."""
    pods = await upstream.call(V1 + "ListPodSandbox", pb.ListPodSandboxRequest(),
                               pb.ListPodSandboxResponse)
    live: dict[str, PodRecord] = {}
    for p in pods.items:
        if p.state != pb.PodSandboxState.SANDBOX_READY:
            continue
        known = cache.pods.get(p.id)
        if known is None or not known.cgroup_parent:
            status = await upstream.call(V1 + "PodSandboxStatus",
                                         pb.PodSandboxStatusRequest(pod_sandbox_id=p.id, verbose=True),
                                         pb.PodSandboxStatusResponse)
            known = PodRecord(id=p.id, name=p.metadata.name, namespace=p.metadata.namespace,
                              uid=p.metadata.uid, cgroup_parent=cgroup_parent_from_info(dict(status.info)),
                              annotations=dict(status.status.annotations or p.annotations),
                              labels=dict(status.status.labels or p.labels))
        live[p.id] = known
    return live


async def _new_container(upstream: RuntimeCalls, c: pb.Container, pod: PodRecord,
                         reserved_namespaces: tuple[str, ...]) -> ContainerRecord:
    """A running container the cache did not know, with the resources its runtime spec holds."""
    status = await upstream.call(V1 + "ContainerStatus",
                                 pb.ContainerStatusRequest(container_id=c.id, verbose=True),
                                 pb.ContainerStatusResponse)
    res = resources_from_info(dict(status.info))
    key = f"{c.pod_sandbox_id}:{c.metadata.name}:{c.metadata.attempt}"
    w = classify.workload_or_plain(
        key=key, namespace=pod.namespace, pod=pod.name, container=c.metadata.name,
        cgroup_parent=pod.cgroup_parent, pod_annotations=pod.annotations,
        container_annotations=dict(c.annotations),
        labels={**pod.labels, **c.labels},
        cri_resources=classify.requirements_from_cri(res.cpu_shares, res.cpu_quota, res.cpu_period,
                                                     res.memory_limit_in_bytes),
        reserved_namespaces=reserved_namespaces)
    return ContainerRecord(key=key, pod_id=c.pod_sandbox_id, name=c.metadata.name, workload=w, id=c.id,
                           state=_state(c),
                           resources=json_format.MessageToDict(res, preserving_proto_field_name=True))


def _state(c: pb.Container) -> str:
    return "running" if c.state == pb.ContainerState.CONTAINER_RUNNING else "created"
