"""Start-up adoption: learn the runtime's pods and containers before serving,
and reconcile them with the saved state (new ones added, vanished ones dropped)."""

from __future__ import annotations

import logging

from cri_resmgr.bounded import clip
from cri_resmgr.engine import classify, resdict
from cri_resmgr.engine.cache import Cache, ContainerRecord, PodRecord
from cri_resmgr.engine.runtime import ContainerInfo, PodInfo, RuntimePort

log = logging.getLogger(__name__)


async def adopt(runtime: RuntimePort, cache: Cache, reserved_namespaces: tuple[str, ...]) -> dict[str, int]:
    """Fills `cache` (which may hold saved state) from the runtime; returns counts. From
    a partial listing (`listing_complete`) nothing saved is dropped: what it does not
    name is kept as saved until an event or a later listing tells."""
    complete = runtime.listing_complete
    live_pods = await _live_pods(runtime, cache)
    cache.set_pods(live_pods if complete else {**cache.pods, **live_pods})
    listed = await runtime.containers()
    seen: set[str] = set()
    added = kept = 0
    for c in listed:
        if c.state == "exited" or c.pod_id not in live_pods:
            continue
        seen.add(c.id)
        record = cache.by_id(c.id)
        if record is not None:
            record.state = _state(c)
            record.released = False
            kept += 1
            continue
        try:
            record = await _new_container(runtime, c, live_pods[c.pod_id], reserved_namespaces)
        except Exception as e:  # one container the runtime cannot tell about must not stop the start
            log.warning("cannot read container %s (%s) from the runtime (%s: %s): skipped; the periodic "
                        "reconcile adopts it", c.name, c.id[:12], type(e).__name__, clip(str(e), 160))
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
    log.info("discovered %d pod%s; containers: %d known from the saved state, %d adopted (not in the saved state), "
             "%d gone since the last run", counts["pods"], "" if counts["pods"] == 1 else "s", kept, added,
             len(vanished))
    return counts


async def unknown_containers(runtime: RuntimePort, cache: Cache, containers: list[ContainerInfo],
                             reserved_namespaces: tuple[str, ...]) -> list[ContainerRecord]:
    """Records for running containers the cache does not know (the periodic reconcile),
    built as at start-up; a pod the cache does not know either is asked for once."""
    records = []
    for c in containers:
        pod = cache.pods.get(c.pod_id)
        if pod is None:
            info = await runtime.pod_info(c.pod_id)
            if not info.ready:
                continue
            pod = _record(info)
            cache.add_pod(pod)
        records.append(await _new_container(runtime, c, pod, reserved_namespaces))
    return records


async def _live_pods(runtime: RuntimePort, cache: Cache) -> dict[str, PodRecord]:
    """The runtime's ready pods; the saved record of each is kept when it has its cgroup parent."""
    live: dict[str, PodRecord] = {}
    for p in await runtime.pods():
        if not p.ready:
            continue
        known = cache.pods.get(p.id)
        if known is None or not known.cgroup_parent:
            # A listing that does not tell the cgroup parent (CRI's): the pod's status does.
            status = p if p.cgroup_parent else await runtime.pod_info(p.id)
            known = PodRecord(id=p.id, name=p.name, namespace=p.namespace, uid=p.uid,
                              cgroup_parent=status.cgroup_parent,
                              annotations=dict(status.annotations or p.annotations),
                              labels=dict(status.labels or p.labels))
        live[p.id] = known
    return live


def _record(p: PodInfo) -> PodRecord:
    return PodRecord(id=p.id, name=p.name, namespace=p.namespace, uid=p.uid, cgroup_parent=p.cgroup_parent,
                     annotations=dict(p.annotations), labels=dict(p.labels))


async def _new_container(runtime: RuntimePort, c: ContainerInfo, pod: PodRecord,
                         reserved_namespaces: tuple[str, ...]) -> ContainerRecord:
    """A running container the cache did not know, with the resources its runtime spec holds."""
    res = (await runtime.container_detail(c.id)).resources
    key = c.key
    w = classify.workload_or_plain(
        key=key, namespace=pod.namespace, pod=pod.name, container=c.name,
        cgroup_parent=pod.cgroup_parent, pod_annotations=pod.annotations,
        container_annotations=dict(c.annotations),
        labels={**pod.labels, **c.labels},
        cri_resources=classify.requirements_from_cri(res.cpu_shares, res.cpu_quota, res.cpu_period,
                                                     res.memory_limit_in_bytes),
        reserved_namespaces=reserved_namespaces)
    return ContainerRecord(key=key, pod_id=c.pod_id, name=c.name, workload=w, id=c.id,
                           state=_state(c),
                           resources=resdict.to_dict(res))


def _state(c: ContainerInfo) -> str:
    return "running" if c.state == "running" else "created"
