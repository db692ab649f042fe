"""A relay's state built the way the engine builds it: a real policy on a generated
topology, a real cache, `snapshot.take`; for the rendering and endpoint tests."""

from __future__ import annotations

from typing import Any

from cri_resmgr.config import parse_document
from cri_resmgr.engine import snapshot
from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.static_plus import StaticPlusPolicy
from tests.harness.sysfs import fake_topology

# key, namespace, pod, name, QoS, milli-CPU, system
CONTAINERS = [
    ("k-db", "prod", "db-0", "postgres", QoS.GUARANTEED, 2000, False),  # 2 exclusive, from isolated CPUs
    ("k-web", "prod", "web-1", "nginx", QoS.BURSTABLE, 500, False),  # shared
    ("k-dns", "kube-system", "coredns-x", "coredns", QoS.BURSTABLE, 100, True),  # reserved
    ("k-a", "team", "a", "c", QoS.GUARANTEED, 1000, False),  # 1 exclusive from shared; name clash: "a:c"
    ("k-b", "team", "b", "c", QoS.BESTEFFORT, 0, False),  # shared; "b:c"
    ("k-odd", "team", "odd", "x<&>y", QoS.GUARANTEED, 1500, False),  # 1 exclusive + shared; XML-hostile name
]

CONFIG = "policy:\n  Active: static-plus\n  ReservedResources: {CPU: cpuset:0}\n"


def engine_state() -> snapshot.EngineState:
    """2 packages x 2 cores x 2 threads (CPUs 0-7), CPUs 6-7 isolated; static-plus, CPU 0 reserved."""
    topo = fake_topology(sockets=2, cores_per_die=2, threads_per_core=2, isolated=[6, 7])
    policy = StaticPlusPolicy(build_context(topo, reserved="cpuset:0"))
    cache = Cache(None)
    for key, ns, pod, name, qos, milli, system in CONTAINERS:
        w = Workload(key=key, namespace=ns, pod=pod, name=name, qos=qos, cpu_request=milli,
                     cpu_limit=milli if qos is QoS.GUARANTEED else None, memory_request=1 << 20, system=system)
        cache.add_container(ContainerRecord(key=key, pod_id=f"pod-{pod}", name=name, workload=w,
                                            id=f"{key}-0123456789abcdef", state="running"))
        policy.allocate(w)
    config = parse_document(CONFIG, "/etc/cri-resmgr/config.yaml", ["none", "static", "static-plus"])
    return snapshot.take("static-plus", policy, cache, snapshot.summarise(topo), config, dry_run=False)


def document() -> dict[str, Any]:
    return engine_state().to_document()
