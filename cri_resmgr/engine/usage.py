"""Who holds which CPUs, node-wide: the policy's pools, the free exclusive-capable
CPUs per NUMA node, and each container's exclusive CPUs by name.

For metrics (read at scrape time) and the export to the Node through the agent.
None under the none policy, which holds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cri_resmgr.engine.cache import Cache
from cri_resmgr.policy.api import Policy
from cri_resmgr.policy.usage import PoolUsage
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuset import CPUSet


@dataclass(frozen=True)
class ContainerCPUs:
    namespace: str
    pod: str
    container: str
    exclusive: int  # CPUs


@dataclass(frozen=True)
class NodeUsage:
    policy: str
    pools: tuple[PoolUsage, ...]
    members: Mapping[str, int]  # container pool name -> containers
    exclusive_free: Mapping[int, CPUSet]  # NUMA node -> free exclusive-capable CPUs (nodes with CPUs)
    containers: tuple[ContainerCPUs, ...]  # those with exclusive CPUs, most CPUs first


def node_usage(policy_name: str, policy: Policy, topology: Topology, cache: Cache) -> NodeUsage | None:
    u = policy.usage()
    free = {n: u.exclusive_free & topology.node_cpus(n) for n in topology.node_ids() if topology.node_cpus(n)}
    records = dict(list(cache.containers.items()))
    containers = []
    for key, cpus in u.exclusive.items():
        r = records.get(key)
        if r is not None:
            w = r.workload
            containers.append(ContainerCPUs(w.namespace, w.pod, w.name, len(cpus)))
    containers.sort(key=lambda c: (-c.exclusive, c.namespace, c.pod, c.container))
    return NodeUsage(policy_name, u.pools, u.members, free, tuple(containers))
