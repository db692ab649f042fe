"""The runtime's running containers as they are, for `/state` under the none policy.

With no policy in force the engine keeps no cache: it decides nothing. `cri-resmgr status`,
the documented first step, would then say "No containers." while pods run. This reads them
from the runtime when /state is asked (one ListContainers, then one verbose ContainerStatus
per running container for its pid) and their real cpusets from their cgroups
(`realcpuset.py`): what the node runs before any policy manages it.
"""

from __future__ import annotations

import logging

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine import realcpuset
from cri_resmgr.engine.runtime import RuntimeCalls
from cri_resmgr.engine.snapshot import ContainerState
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

V1 = "/runtime.v1.RuntimeService/"
TIMEOUT = 2.0  # per call: /state waits at most a few seconds in all


async def observe(runtime: RuntimeCalls, cgroups: realcpuset.CgroupReader) -> tuple[ContainerState, ...]:
    """The running containers with their real cpusets, not managed; raises what the runtime
    call raises (the caller answers /state without them)."""
    listed = await runtime.call(V1 + "ListContainers", pb.ListContainersRequest(
        filter=pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))),
        pb.ListContainersResponse, TIMEOUT)
    out = []
    for c in listed.containers:
        real = None
        try:
            status = await runtime.call(V1 + "ContainerStatus", pb.ContainerStatusRequest(container_id=c.id,
                                        verbose=True), pb.ContainerStatusResponse, TIMEOUT)
            pid = realcpuset.pid_from_info(dict(status.info))
            real = cgroups.read(pid, c.id) if pid else None
        except Exception as e:  # gone meanwhile, or slow: shown without its cpuset
            log.debug("status of container %s: %s", c.id, e)
        labels = c.labels
        out.append(ContainerState(
            id=c.id, namespace=labels.get("io.kubernetes.pod.namespace", ""),
            pod=labels.get("io.kubernetes.pod.name", ""),
            name=labels.get("io.kubernetes.container.name", c.metadata.name), qos="", state="running",
            cpu_request=0, cpu_limit=None, memory_request=0, memory_limit=None, pool=None,
            exclusive=CPUSet(), shared=real.cpus if real is not None else CPUSet(),
            mems=str(real.mems) if real is not None and real.mems is not None else None, managed=False))
    out.sort(key=lambda s: (s.namespace, s.pod, s.name, s.id))
    return tuple(out)
