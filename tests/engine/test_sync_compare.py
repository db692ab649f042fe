"""resmgr._sync sends a container the policy's resources only when they differ from what
it was told last, by value: equal Resources in another object send nothing, whatever
the objects the policy and the last update shared."""

import asyncio

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.engine.resmgr import ResourceManager
from cri_resmgr.policy.api import QoS, Resources, Workload
from cri_resmgr.topology.cpuset import CPUSet


class _Policy:
    def __init__(self) -> None:
        self.held: dict[str, Resources] = {}

    def resources(self, key: str) -> Resources | None:
        return self.held.get(key)


class _Enforcer:
    def __init__(self) -> None:
        self.sent: dict[str, str] = {}

    def submit(self, container_id: str, linux: pb.LinuxContainerResources, name: object = "") -> None:
        self.sent[container_id] = linux.cpuset_cpus


def _manager(keys: list[str]) -> tuple[ResourceManager, _Policy, _Enforcer]:
    cache, policy, enforcer = Cache(None), _Policy(), _Enforcer()
    for key in keys:
        w = Workload(key=key, namespace="default", pod=key, name="c", qos=QoS.BESTEFFORT)
        cache.add_container(ContainerRecord(key=key, pod_id=key, name="c", workload=w, id=f"id-{key}"))
    return ResourceManager("stub", policy, cache, enforcer, asyncio.Lock()), policy, enforcer  # type: ignore[arg-type]


def test_equal_resources_in_other_objects_are_not_sent_and_changed_ones_are() -> None:
    keys = [f"k{i}" for i in range(6)]
    rm, policy, enforcer = _manager(keys)
    pool = Resources(CPUSet("0-3"), "0")
    policy.held = dict.fromkeys(keys, pool)
    rm._sync(set(keys), "creating")
    assert enforcer.sent == {f"id-{k}": "0-3" for k in keys}

    # The pool again as a new but equal object for the first three, a new pool for the
    # next two, an equal copy of the new pool for the last: what the keys were told last
    # is one object, what they get is two, and the answer differs by value.
    enforcer.sent.clear()
    again, grown = Resources(CPUSet("0-3"), "0"), Resources(CPUSet("0-4"), "0")
    policy.held = {"k0": again, "k1": again, "k2": again, "k3": grown, "k4": grown,
                   "k5": Resources(CPUSet("0-4"), "0")}
    rm._sync(set(keys), "releasing")
    assert enforcer.sent == {"id-k3": "0-4", "id-k4": "0-4", "id-k5": "0-4"}

    # Told last: k3, k4 one object, k5 another equal one; all now get the old pool back.
    enforcer.sent.clear()
    policy.held = dict.fromkeys(keys, pool)
    rm._sync(set(keys), "creating")
    assert enforcer.sent == {"id-k3": "0-3", "id-k4": "0-3", "id-k5": "0-3"}
