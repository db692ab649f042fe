"""The runtime's running containers as they are, for `/state` under the none policy.

With no policy in force the engine keeps no cache: it decides nothing. `cri-resmgr status`,
the documented first step, would then say "No containers." while pods run. This reads them
from the runtime when /state is asked (one listing, then each running container's detail
for its pid) and their real cpusets from their cgroups
(`realcpuset.py`): what the node runs before any policy manages it.
"""

from __future__ import annotations

import logging

from cri_resmgr.engine import realcpuset
from cri_resmgr.engine.runtime import RuntimePort
from cri_resmgr.engine.snapshot import ContainerState
from cri_resmgr.topology.cpuset import CPUSet

log = logging.getLogger(__name__)

TIMEOUT = 2.0  # per call: /state waits at most a few seconds in all


async def observe(runtime: RuntimePort, cgroups: realcpuset.CgroupReader) -> tuple[ContainerState, ...]:
    """The running containers with their real cpusets, not managed; raises what the runtime
    call raises (the caller answers /state without them)."""
    listed = [c for c in await runtime.containers(TIMEOUT) if c.state == "running"]
    out = []
    for c in listed:
        real = None
        try:
            pid = (await runtime.container_detail(c.id, TIMEOUT)).pid
            real = cgroups.read(pid, c.id) if pid else None
        except Exception as e:  # gone meanwhile, or slow: shown without its cpuset
            log.debug("status of container %s: %s", c.id, e)
        labels = c.labels
        out.append(ContainerState(
            id=c.id, namespace=labels.get("io.kubernetes.pod.namespace", ""),
            pod=labels.get("io.kubernetes.pod.name", ""),
            name=labels.get("io.kubernetes.container.name", c.name), qos="", state="running",
            cpu_request=0, cpu_limit=None, memory_request=0, memory_limit=None, pool=None,
            exclusive=CPUSet(), shared=real.enforced if real is not None else CPUSet(),
            mems=str(real.mems) if real is not None and real.mems is not None else None, managed=False))
    out.sort(key=lambda s: (s.namespace, s.pod, s.name, s.id))
    return tuple(out)
