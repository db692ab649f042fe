"""`NriRuntime` as the engine's runtime port: its answers come from the NRI messages it
keeps (no CRI messages, no JSON), its failures are the port's errors, and its updates go
into the reply of the hook being answered, else with UpdateContainers."""

from __future__ import annotations

import asyncio

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.runtime import ContainerDetail, NotFound, RuntimeFailure, RuntimeVersion, Unavailable
from cri_resmgr.nri.view import NriRuntime
from tests.nri.runtime_double import container, guaranteed, pod


def _view() -> NriRuntime:
    view = NriRuntime("test.sock")
    started = guaranteed("g1", "p1", 2)
    started.pid = 4321
    started.linux.cgroups_path = "/kubepods/podp1/g1"
    started.annotations["io.kubernetes.container.restartCount"] = "3"
    view.synchronize([pod("p1", "guaranteed"), pod("p2")],
                     [started, container("b1", "p2", state=api.CONTAINER_STOPPED),
                      container("c1", "p2", state=api.CONTAINER_CREATED)])
    view.pod_stopped(pod("p2"))
    return view


def test_listings_and_details_from_the_nri_state() -> None:
    async def go() -> None:
        view = _view()
        assert view.listing_complete
        pods = {p.id: p for p in await view.pods()}
        assert pods["p1"].ready and not pods["p2"].ready
        assert pods["p1"].cgroup_parent == "/kubepods/podp1" and pods["p1"].uid == "uid-p1"
        assert await view.pod_info("p1") == pods["p1"]
        listed = {c.id: c for c in await view.containers()}
        assert {cid: c.state for cid, c in listed.items()} == {"g1": "running", "b1": "exited", "c1": "created"}
        assert listed["g1"].key == "p1:ctr-g1:3"
        assert await view.container_detail("g1") == ContainerDetail(
            resources=pb.LinuxContainerResources(cpu_shares=2048, cpu_quota=200000, cpu_period=100000,
                                                 memory_limit_in_bytes=1 << 28),
            pid=4321, cgroups_path="/kubepods/podp1/g1")
        with pytest.raises(NotFound):
            await view.container_detail("gone")
        with pytest.raises(NotFound):
            await view.pod_info("gone")
    asyncio.run(go())


def test_version_needs_the_connection() -> None:
    async def go() -> None:
        view = NriRuntime("test.sock")
        with pytest.raises(Unavailable):
            await view.version()

        async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
            return []
        view.connected(send, "containerd", "2.1.9")
        assert await view.version() == RuntimeVersion(name="containerd", version="2.1.9", api_version="NRI")
    asyncio.run(go())


def test_updates_go_in_the_hooks_reply_else_alone_and_fail_as_the_ports_errors() -> None:
    async def go() -> None:
        view = _view()
        cpus = pb.LinuxContainerResources(cpuset_cpus="2-3", cpuset_mems="0", cpu_shares=99)
        with pytest.raises(Unavailable):  # not connected
            await view.update("g1", cpus)
        sent: list[api.ContainerUpdate] = []
        refuse = False

        async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
            sent.extend(updates)
            return list(updates) if refuse else []
        view.connected(send)
        view.collect()
        await view.update("g1", cpus)
        collected = view.collected()
        assert [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) for u in collected] \
            == [("g1", "2-3", "0")] and not sent
        assert not collected[0].linux.resources.cpu.HasField("shares")  # only the cpuset is the policy's
        await view.update("g1", cpus)  # no hook answered: sent alone
        assert [u.container_id for u in sent] == ["g1"]
        refuse = True
        with pytest.raises(RuntimeFailure) as failed:
            await view.update("g1", cpus)
        assert not isinstance(failed.value, NotFound)
        with pytest.raises(NotFound):  # the listing is complete: an unknown container is gone
            await view.update("nope", cpus)
    asyncio.run(go())
