"""The engine's core in its own forms (engine/core.py), as both front ends call it: a
pod record, a container spec and the runtime's step in, the policy's resources or the
project's errors out; and the relay's CRI adapter over it (engine/cri.py). The static
policy on 8 CPUs, 2 of them reserved: 6 can be exclusive."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.config import parse_document
from cri_resmgr.engine import cri
from cri_resmgr.engine.cache import Cache, PodRecord
from cri_resmgr.engine.classes import ClassesOnly
from cri_resmgr.engine.controller import build_policy
from cri_resmgr.engine.core import ContainerSpec, PolicyFailed, ResizeRefused
from cri_resmgr.engine.resmgr import Options, ResourceManager
from cri_resmgr.policy.api import Resources
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.transport.contract import UNCHANGED, InterceptError, Request
from tests.harness import sysfs

CONFIG = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 2\n"
V1 = "/runtime.v1.RuntimeService/"


def _manager(tmp_path: Path, fail_closed: bool = False) -> ResourceManager:
    sysfs.generate(tmp_path / "host", sockets=1, cores_per_die=4, threads_per_core=2)
    registry = default_registry()
    topology = discover(tmp_path / "host")
    policy = build_policy(registry.lookup("static"), parse_document(CONFIG, "test", registry.names()),
                          lambda: topology)
    assert policy is not None
    return ResourceManager("static", policy, Cache(None), None, asyncio.Lock(), Options(fail_closed=fail_closed))


def _pod(pod_id: str) -> PodRecord:
    return PodRecord(id=pod_id, name=pod_id, namespace="default", cgroup_parent=f"/kubepods/pod{pod_id}")


def _guaranteed(pod_id: str, cpus: int) -> ContainerSpec:
    return ContainerSpec(pod=_pod(pod_id), name="c", attempt=0, resources=_sized(cpus))


def _sized(cpus: int) -> pb.LinuxContainerResources:
    return pb.LinuxContainerResources(cpu_shares=1024 * cpus, cpu_quota=100000 * cpus, cpu_period=100000,
                                      memory_limit_in_bytes=1 << 28)


def test_a_create_returns_the_policys_resources_given_to_the_runtimes_step(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    given: list[Resources | None] = []

    async def created(r: Resources | None) -> str:
        given.append(r)
        return "cid-g"

    async def main() -> Resources | None:
        await m.pod_started(_pod("g"))
        return await m.create(_guaranteed("g", 2), created)

    placed = asyncio.run(main())
    assert placed is not None and len(placed.cpuset_cpus) == 2
    assert given == [placed]
    record = m.cache.by_id("cid-g")
    assert record is not None and record.key == "g:c:0" and record.state == "created"
    assert record.resources["cpuset_cpus"] == str(placed.cpuset_cpus)  # the record form, as saved


def test_a_create_the_runtime_refuses_is_released(tmp_path: Path) -> None:
    m = _manager(tmp_path)

    async def refused(r: Resources | None) -> str:
        raise OSError("the runtime said no")

    async def main() -> Resources | None:
        with pytest.raises(OSError):
            await m.create(_guaranteed("g", 6), refused)

        async def created(r: Resources | None) -> str:
            return "cid-h"
        return await m.create(_guaranteed("h", 6), created)  # all six exclusive CPUs are free again

    placed = asyncio.run(main())
    assert m.cache.containers.keys() == {"h:c:0"}
    assert placed is not None and len(placed.cpuset_cpus) == 6


def test_a_resize_that_cannot_be_met_is_refused_with_nothing_sent(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    sent: list[Resources | None] = []

    async def send(r: Resources | None) -> None:
        sent.append(r)

    async def created(r: Resources | None) -> str:
        return "cid-g"

    async def main() -> tuple[Resources | None, Resources | None]:
        placed = await m.create(_guaranteed("g", 2), created)
        with pytest.raises(ResizeRefused) as refused:
            await m.update("cid-g", _sized(7), send)
        assert refused.value.message.startswith("cri-resmgr: cannot resize ")
        assert str(placed.cpuset_cpus if placed else "") in refused.value.message  # what it keeps
        kept = await m.update("cid-g", _sized(3), send)  # one that fits
        return placed, kept

    placed, kept = asyncio.run(main())
    assert placed is not None and kept is not None
    assert sent == [kept] and len(kept.cpuset_cpus) == 3 and placed.cpuset_cpus < kept.cpuset_cpus
    assert m.stats().resizes_refused == 1 and m.stats().resizes == 1


def test_a_failing_policy_fails_the_create_closed_or_lets_it_through_open(tmp_path: Path) -> None:
    def broken(w: object) -> object:
        raise RuntimeError("policy exploded")

    given: list[Resources | None] = []

    async def created(r: Resources | None) -> str:
        given.append(r)
        return "cid"

    closed = _manager(tmp_path / "closed", fail_closed=True)
    closed.policy.allocate = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(PolicyFailed, match="cri-resmgr policy static: policy exploded"):
        asyncio.run(closed.create(_guaranteed("g", 1), created))
    assert given == [] and not closed.cache.containers

    opened = _manager(tmp_path / "open")
    opened.policy.allocate = broken  # type: ignore[method-assign,assignment]
    assert asyncio.run(opened.create(_guaranteed("g", 1), created)) is None
    assert given == [None] and not opened.cache.containers  # created as asked, not tracked
    assert opened.stats().policy_errors == 1


def test_the_cri_adapter_writes_the_decision_into_the_request_and_maps_refusals(tmp_path: Path) -> None:
    m = _manager(tmp_path)
    table = cri.interceptors(m)
    forwarded: list[Message] = []

    async def forward(msg: Message) -> Message:
        forwarded.append(msg)
        if isinstance(msg, pb.CreateContainerRequest):
            return pb.CreateContainerResponse(container_id="cid-g")
        return pb.UpdateContainerResourcesResponse()

    sandbox = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="g", namespace="default"),
                                  linux=pb.LinuxPodSandboxConfig(cgroup_parent="/kubepods/podg"))
    create = pb.CreateContainerRequest(pod_sandbox_id="g", sandbox_config=sandbox, config=pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="c"), linux=pb.LinuxContainerConfig(resources=_sized(2))))
    update = pb.UpdateContainerResourcesRequest(container_id="cid-g", linux=_sized(7))

    async def main() -> None:
        reply = await table["CreateContainer"](Request("CreateContainer", V1 + "CreateContainer", create, forward))
        assert isinstance(reply, pb.CreateContainerResponse) and reply.container_id == "cid-g"
        with pytest.raises(InterceptError) as refused:
            await table["UpdateContainerResources"](
                Request("UpdateContainerResources", V1 + "UpdateContainerResources", update, forward))
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.message.startswith("cri-resmgr: cannot resize ")

    asyncio.run(main())
    assert forwarded == [create]  # the refused update never reached the runtime
    assert len(CPUSet(create.config.linux.resources.cpuset_cpus)) == 2
    assert set(table) == {"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "UpdatePodSandboxResources",
                          "CreateContainer",
                          "StartContainer", "StopContainer", "RemoveContainer", "UpdateContainerResources",
                          "ListContainers", "StreamContainers", "ContainerStatus"}


def test_a_core_gets_only_the_calls_it_takes() -> None:
    assert cri.interceptors(None) == {}
    classes_only = ClassesOnly(None, None, ())  # type: ignore[arg-type]
    assert set(cri.interceptors(classes_only)) == {"StartContainer"}


def test_the_relays_feed_makes_the_core_its_transports_table(tmp_path: Path) -> None:
    class _Transport:
        def __init__(self) -> None:
            self.calls: list[dict[str, object]] = []

        def reconfigure(self, **changes: object) -> None:
            self.calls.append(changes)

    transport = _Transport()
    feed = cri.TransportFeed(transport)  # type: ignore[arg-type]
    feed.reconfigure(engine=_manager(tmp_path))
    feed.reconfigure(dumper=None)  # the table in force is kept: not handed again
    feed.reconfigure(engine=None)
    first, second, third = transport.calls
    assert "CreateContainer" in first["interceptors"] and first["dumper"] is UNCHANGED  # type: ignore[operator]
    assert second == {"dumper": None}
    assert third == {"interceptors": {}, "dumper": UNCHANGED}
