"""`NriRuntime` as the engine's runtime port: its answers come from the NRI messages it
keeps (no CRI messages, no JSON), its failures are the port's errors, and its updates go
into the reply of the hook being answered, else with UpdateContainers once no call of the
runtime's is in flight, and those of a container being created or started after its start."""

from __future__ import annotations

import asyncio

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.runtime import ContainerDetail, NotFound, RuntimeVersion, Unavailable
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


def _sender(sent: list[api.ContainerUpdate], refuse: list[bool] | None = None):  # type: ignore[no-untyped-def]
    async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        sent.extend(updates)
        return list(updates) if refuse else []
    return send


def test_updates_go_in_the_hooks_reply_else_with_update_containers_and_failures_are_logged(caplog) -> None:
    async def go() -> None:
        view = _view()
        cpus = pb.LinuxContainerResources(cpuset_cpus="2-3", cpuset_mems="0", cpu_shares=99)
        with pytest.raises(Unavailable):  # not connected
            await view.update("g1", cpus)
        sent: list[api.ContainerUpdate] = []
        refuse: list[bool] = []
        view.connected(_sender(sent, refuse))
        view.collect()
        await view.update("g1", cpus)
        collected = view.collected()
        assert [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) for u in collected] \
            == [("g1", "2-3", "0")] and not sent
        assert not collected[0].linux.resources.cpu.HasField("shares")  # only the cpuset is the policy's
        await view.update("g1", cpus)  # no hook answered: UpdateContainers, not waited for
        await view.drained()
        assert [u.container_id for u in sent] == ["g1"]
        refuse.append(True)
        await view.update("g1", cpus)  # the runtime's failure is logged: the reconcile sends it again
        await view.drained()
        assert "the runtime failed to update container g1" in caplog.text
        with pytest.raises(NotFound):  # the listing is complete: an unknown container is gone
            await view.update("nope", cpus)
    asyncio.run(go())


def test_no_update_containers_while_a_call_of_the_runtime_is_in_flight() -> None:
    """containerd before NRI v0.12.1 can deadlock on an UpdateContainers that meets a
    lifecycle event (containerd#13733); later ones hold it until the event ends."""
    async def go() -> None:
        view = _view()
        sent: list[api.ContainerUpdate] = []
        view.connected(_sender(sent))
        cpus = pb.LinuxContainerResources(cpuset_cpus="2-3")
        view.delivery.call_began()  # e.g. a RemoveContainer, whose reply carries nothing
        await view.update("g1", cpus)
        for _ in range(20):  # the sender had every chance to run
            await asyncio.sleep(0)
        assert sent == []
        view.delivery.call_answered()
        await view.drained()
        assert [u.container_id for u in sent] == ["g1"]

        # Between the parts of a Synchronize, too: the runtime holds its lock across them.
        sent.clear()
        view.delivery.synchronizing(True)
        await view.update("g1", cpus)
        for _ in range(20):
            await asyncio.sleep(0)
        assert sent == []
        view.delivery.synchronizing(False)
        await view.drained()
        assert [u.container_id for u in sent] == ["g1"]

        # Queued while a call is in flight, then a hook whose reply carries updates
        # begins: the reply takes it, and no UpdateContainers is made.
        sent.clear()
        view.delivery.call_began()
        await view.update("g1", cpus)
        view.delivery.call_began()
        view.collect()
        assert [u.container_id for u in view.collected()] == ["g1"]
        view.delivery.call_answered()
        view.delivery.call_answered()
        await view.drained()
        assert sent == []
    asyncio.run(go())


def test_an_update_of_a_container_being_created_or_started_waits_for_its_start() -> None:
    """containerd applies an update to nothing while it creates a container and to its
    spec only until its task has started: it is sent after the PostStartContainer."""
    async def go() -> None:
        view = _view()
        sent: list[api.ContainerUpdate] = []
        view.connected(_sender(sent))
        view.container(container("n1", "p1", state=api.CONTAINER_CREATED))
        view.launching("n1")
        view.collect()  # another container's CreateContainer decides n1's cpuset
        await view.update("n1", pb.LinuxContainerResources(cpuset_cpus="0"))
        await view.update("n1", pb.LinuxContainerResources(cpuset_cpus="0-1"))
        assert view.collected() == []  # not in that reply: it would reach nothing
        view.push([api.ContainerUpdate(container_id="n1")])  # nor a late decision's
        await view.update("n1", pb.LinuxContainerResources(cpuset_cpus="0-1"))
        await view.drained()
        assert sent == [] and view.is_launching("n1")
        view.delivery.call_began()  # its PostStartContainer
        view.started("n1")
        view.delivery.call_answered()
        await view.drained()
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sent] == [("n1", "0-1")]
        assert not view.is_launching("n1") and view.sent_after_start == 1

        # A start that fails (StopContainer) or a removal: nothing owed any more.
        sent.clear()
        view.launching("n2")
        view.container(container("n2", "p1", state=api.CONTAINER_CREATED))
        await view.update("n2", pb.LinuxContainerResources(cpuset_cpus="0"))
        view.stopped("n2")
        view.started("n2")
        await view.drained()
        assert sent == []
    asyncio.run(go())


def test_a_container_listed_as_created_at_synchronize_gets_its_update_after_its_start() -> None:
    """One created while the plugin was away (no CreateContainer of it): its start may be
    in flight as the Synchronize comes, so what is decided for it waits for its start."""
    async def go() -> None:
        view = _view()  # c1 is listed as created
        sent: list[api.ContainerUpdate] = []
        view.connected(_sender(sent))
        assert view.is_launching("c1") and not view.is_launching("g1")
        await view.update("c1", pb.LinuxContainerResources(cpuset_cpus="0"))
        await view.drained()
        assert sent == []
        view.delivery.call_began()  # its PostStartContainer
        view.started("c1")
        view.delivery.call_answered()
        await view.drained()
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sent] == [("c1", "0")]
        assert view.sent_after_start == 1
    asyncio.run(go())


def test_carried_updates_go_in_the_next_reply_that_can_take_them_or_alone_later(monkeypatch) -> None:
    """What a removal frees (its reply carries nothing) can wait for the next reply."""
    from cri_resmgr.nri import delivery
    monkeypatch.setattr(delivery, "CARRY_WAIT", 0.01)

    async def go() -> None:
        view = _view()
        sent: list[api.ContainerUpdate] = []
        view.connected(_sender(sent))
        freed = api.ContainerUpdate(container_id="g1")
        view.carry([freed])
        view.collect()
        assert [u.container_id for u in view.collected()] == ["g1"]
        view.carry([freed])  # no such reply comes: UpdateContainers after CARRY_WAIT
        await view.drained()
        assert [u.container_id for u in sent] == ["g1"]
        sent.clear()
        view.carry([freed])
        view.container_removed("g1")  # gone meanwhile: nothing to send it
        await view.drained()
        assert sent == []
    asyncio.run(go())


def test_nothing_is_sent_to_a_container_once_it_is_stopping() -> None:
    """containerd applies a StopContainer reply's updates under its NRI lock, and an
    update of a stopping container as the task's update while its exit is handled: the
    soak against 2.1.9 stalled after one ("post-stop update failed"). Once a container's
    StopContainer (or its pod's StopPodSandbox) is heard, what was queued, carried or
    collected for it is dropped and nothing new is queued."""
    async def go() -> None:
        view = _view()
        sent: list[api.ContainerUpdate] = []
        view.connected(_sender(sent))
        cpus = pb.LinuxContainerResources(cpuset_cpus="2-3")
        view.delivery.call_began()  # queued, not sent yet
        await view.update("g1", cpus)
        view.carry([api.ContainerUpdate(container_id="g1")])
        view.stopped("g1")
        view.delivery.call_answered()
        await view.drained()
        assert sent == []
        await view.update("g1", cpus)  # decided after its stop: not queued
        view.push([api.ContainerUpdate(container_id="g1")])
        view.carry([api.ContainerUpdate(container_id="g1")])
        await view.drained()
        assert sent == []
        view.collect()
        await view.update("g1", cpus)
        assert view.collected() == []

        # Stopped while a hook collects: its update leaves the reply, the others' stay.
        view.container(guaranteed("g2", "p1", 1))
        view.container(guaranteed("g3", "p1", 1))
        view.collect()
        await view.update("g2", cpus)
        await view.update("g3", cpus)
        view.stopped("g2")
        assert [u.container_id for u in view.collected()] == ["g3"]
    asyncio.run(go())
