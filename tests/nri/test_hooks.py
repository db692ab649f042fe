"""The plugin service's hooks in-process (cri_resmgr/nri/hooks.py): what the
runtime gets when the engine fails or is slow, and how NRI events become the
engine's own forms (engine/core.py) and its decisions NRI's adjustments and updates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.core import Bystander, ContainerSpec, CreateStep, PolicyFailed, ResizeRefused, UpdateStep
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.hooks import Hooks, event_mask
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.policy.api import Resources
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.runtime_double import container, guaranteed, pod


async def _nothing() -> None:
    return None


class _Core(Bystander):
    """A core whose decisions the test gives: `decide(spec)` for a create, `resize(id,
    linux)` for an update; `stop` for a stop. Takes every event in `events`."""

    def __init__(self, events: frozenset[str] = frozenset({"CreateContainer", "StopContainer",
                                                           "UpdateContainerResources"}),
                 decide: Callable[[ContainerSpec], Awaitable[Resources | None]] | None = None,
                 resize: Callable[[str, pb.LinuxContainerResources | None], Awaitable[Resources | None]] | None = None,
                 stop: Callable[[str], Awaitable[None]] | None = None):
        self._events, self._decide, self._resize, self._stop = events, decide, resize, stop
        self.specs: list[ContainerSpec] = []

    @property
    def events(self) -> frozenset[str]:
        return self._events

    async def create(self, spec: ContainerSpec, create: CreateStep) -> Resources | None:
        self.specs.append(spec)
        placed = await self._decide(spec) if self._decide is not None else None
        await create(placed)
        return placed

    async def update(self, container_id: str, linux: pb.LinuxContainerResources | None,
                     send: UpdateStep) -> Resources | None:
        keep = await self._resize(container_id, linux) if self._resize is not None else None
        await send(keep)
        return keep

    async def stopped(self, container_id: str) -> None:
        if self._stop is not None:
            await self._stop(container_id)


def _hooks(core: Bystander | None, sent: list[api.ContainerUpdate] | None = None) -> Hooks:
    runtime = NriRuntime("test.sock")

    async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        if sent is not None:
            sent.extend(updates)
        return []

    runtime.connected(send)
    hooks = Hooks(runtime, _nothing)
    hooks.reconfigure(engine=core)
    return hooks


def _create_request() -> api.CreateContainerRequest:
    return api.CreateContainerRequest(pod=pod("g", "guaranteed"), container=guaranteed("g1", "g", 2))


def _cpus(text: str, mems: str | None = None) -> Resources:
    return Resources(CPUSet(text), mems)


def test_event_mask_has_a_bit_per_subscribed_event() -> None:
    assert event_mask((api.RUN_POD_SANDBOX, api.CREATE_CONTAINER)) == 0b1001


def test_the_engine_gets_the_event_in_its_own_forms_and_its_decision_is_the_adjustment() -> None:
    async def decide(spec: ContainerSpec) -> Resources | None:
        return _cpus("2-3", "0")

    core = _Core(decide=decide)
    reply = asyncio.run(_hooks(core).create_container(_create_request()))
    spec = core.specs[0]
    assert (spec.pod.id, spec.key, spec.name, spec.attempt) == ("g", "g:ctr-g1:0", "ctr-g1", 0)
    assert (spec.pod.name, spec.pod.namespace, spec.pod.cgroup_parent) == ("pod-g", "default", "/kubepods/podg")
    r = spec.resources
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes) == (2048, 200000, 100000, 1 << 28)
    assert spec.pod_resources is None
    cpu = reply.adjust.linux.resources.cpu
    assert (cpu.cpus, cpu.mems) == ("2-3", "0")


def test_pod_level_resources_reach_the_engine() -> None:
    core = _Core()
    req = _create_request()
    pr = req.pod.linux.pod_resources
    pr.cpu.shares.value, pr.cpu.quota.value, pr.cpu.period.value = 4096, 400000, 100000
    pr.memory.limit.value = 1 << 30
    asyncio.run(_hooks(core).create_container(req))
    got = core.specs[0].pod_resources
    assert got is not None and (got.cpu_request, got.cpu_limit, got.memory_limit) == (4000, 4000, 1 << 30)


def test_a_core_that_does_not_take_the_event_is_not_asked() -> None:
    core = _Core(events=frozenset({"StartContainer"}))
    hooks = _hooks(core)
    reply = asyncio.run(hooks.create_container(_create_request()))
    assert reply == api.CreateContainerResponse() and core.specs == []
    assert (hooks.counts.calls, hooks.counts.failed) == (1, 0)


def test_a_failing_policy_leaves_the_adjustment_empty_and_is_counted() -> None:
    async def broken(spec: ContainerSpec) -> Resources | None:
        raise PolicyFailed("static", "policy exploded")

    async def buggy(container_id: str) -> None:
        raise KeyError("bug")

    hooks = _hooks(_Core(decide=broken, stop=buggy))
    reply = asyncio.run(hooks.create_container(_create_request()))
    assert reply == api.CreateContainerResponse()
    stopped = asyncio.run(hooks.stop_container(api.StopContainerRequest(pod=pod("g"), container=container("g1", "g"))))
    assert stopped == api.StopContainerResponse()
    assert (hooks.counts.calls, hooks.counts.failed) == (2, 2)


def test_a_resize_the_policy_cannot_meet_fails_the_update_with_its_message() -> None:
    async def refuse(container_id: str, linux: pb.LinuxContainerResources | None) -> Resources | None:
        raise ResizeRefused("cri-resmgr: cannot resize default/pod-g/ctr-g1 to cpu request 7000m")

    hooks = _hooks(_Core(resize=refuse))
    req = api.UpdateContainerRequest(pod=pod("g"), container=guaranteed("g1", "g", 2),
                                     linux_resources=guaranteed("g1", "g", 7).linux.resources)
    with pytest.raises(ttrpc.TtrpcError) as failed:
        asyncio.run(hooks.update_container(req))
    assert failed.value.code == ttrpc.Code.RESOURCE_EXHAUSTED
    assert str(failed.value.message) == "cri-resmgr: cannot resize default/pod-g/ctr-g1 to cpu request 7000m"
    assert hooks.counts.failed == 0  # not the engine's failure: the policy's answer


def test_an_update_keeps_the_policys_cpuset_and_only_it() -> None:
    seen: list[pb.LinuxContainerResources | None] = []

    async def keep(container_id: str, linux: pb.LinuxContainerResources | None) -> Resources | None:
        seen.append(linux)
        return _cpus("2-3")

    req = api.UpdateContainerRequest(pod=pod("g"), container=guaranteed("g1", "g", 2),
                                     linux_resources=guaranteed("g1", "g", 2).linux.resources)
    req.linux_resources.cpu.cpus, req.linux_resources.cpu.mems = "0-7", "0"
    reply = asyncio.run(_hooks(_Core(resize=keep)).update_container(req))
    assert seen[0] is not None and (seen[0].cpu_shares, seen[0].cpuset_cpus) == (2048, "0-7")
    assert [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) for u in reply.update] \
        == [("g1", "2-3", "0")]  # the request's memory nodes: the policy sets none
    assert not reply.update[0].linux.resources.HasField("memory")

    req.linux_resources.cpu.cpus = "2-3"  # already the policy's: nothing to add
    assert asyncio.run(_hooks(_Core(resize=keep)).update_container(req)).update == []


def test_a_slow_decision_gets_an_empty_reply_in_time_and_goes_out_later() -> None:
    sent: list[api.ContainerUpdate] = []
    decided: list[bool] = []

    async def slow(spec: ContainerSpec) -> Resources | None:
        await asyncio.sleep(0.3)
        decided.append(True)
        return _cpus("4-5")

    async def main() -> tuple[api.CreateContainerResponse, bool]:
        hooks = _hooks(_Core(decide=slow), sent)
        hooks.request_timeout = 0.1
        reply = await hooks.create_container(_create_request())
        answered_first = not decided
        for _ in range(400):  # the decision lands, and is sent with UpdateContainers
            if sent:
                break
            await asyncio.sleep(0.05)
        return reply, answered_first

    reply, answered_first = asyncio.run(main())
    assert reply == api.CreateContainerResponse()
    assert answered_first
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sent] == [("g1", "4-5")]


def test_synchronize_in_parts_is_handed_on_once_whole() -> None:
    calls: list[int] = []
    runtime = NriRuntime("test.sock")

    async def synced() -> None:
        calls.append(len(await runtime.containers()))

    async def main() -> list[api.SynchronizeResponse]:
        hooks = Hooks(runtime, _nothing, synced)
        first = await hooks.synchronize(api.SynchronizeRequest(containers=[container("a", "p")], more=True))
        last = await hooks.synchronize(api.SynchronizeRequest(containers=[container("b", "p")]))
        return [first, last]

    first, last = asyncio.run(main())
    assert first.more and not last.more
    assert calls == [2]


def test_fields_a_runtime_knows_and_we_do_not_pass_and_our_replies_use_only_old_fields() -> None:
    # A newer runtime's field (number 99, varint) in the container and in the request:
    # decoded, kept as unknown, harmless.
    extra = bytes([0x98, 0x06, 0x01])  # field 99, wire type 0, value 1
    c = guaranteed("g1", "g", 2).SerializeToString() + extra
    req = api.CreateContainerRequest.FromString(
        api.CreateContainerRequest(pod=pod("g", "guaranteed")).SerializeToString()
        + bytes([0x12, len(c)]) + c + extra)
    assert req.container.id == "g1"

    async def decide(spec: ContainerSpec) -> Resources | None:
        return _cpus("1")

    reply = asyncio.run(_hooks(_Core(decide=decide)).create_container(req))
    assert reply.adjust.linux.resources.cpu.cpus == "1"
    # Configure's reply carries only `events` (field 2), which NRI v0.4 knows.
    configured = asyncio.run(Hooks(NriRuntime("x"), _nothing).configure(api.ConfigureRequest()))
    assert configured.SerializeToString()[:1] == b"\x10" and configured.ListFields()[0][0].name == "events"
    assert len(configured.ListFields()) == 1


def test_a_slow_synchronize_is_answered_in_time_with_what_is_ready() -> None:
    runtime = NriRuntime("test.sock")
    done: list[bool] = []

    async def slow() -> None:
        await asyncio.sleep(0.3)
        done.append(True)

    async def main() -> tuple[api.SynchronizeResponse, bool]:
        hooks = Hooks(runtime, _nothing, slow)
        hooks.request_timeout = 0.1
        reply = await hooks.synchronize(api.SynchronizeRequest(containers=[container("a", "p")]))
        answered_first = not done
        for _ in range(100):
            if done:
                break
            await asyncio.sleep(0.05)
        return reply, answered_first

    reply, answered_first = asyncio.run(main())
    assert reply == api.SynchronizeResponse() and answered_first and done


def test_a_synchronize_in_parts_shares_one_request_timeout() -> None:
    """NRI runs every part of a split Synchronize under one request timeout: the last
    part's deadline is what the earlier parts left of it."""
    hooks = _hooks(None)
    hooks.request_timeout = 2.0

    async def main() -> float:
        await hooks.synchronize(api.SynchronizeRequest(pods=[pod("p1")], more=True))
        return hooks._sync_started

    started = asyncio.run(main())
    assert hooks.sync_deadline(started) == 1.5  # HOOK_SHARE of 2 s
    assert abs(hooks.sync_deadline(started + 1.0) - 0.5) < 1e-9
    assert hooks.sync_deadline(started + 5.0) == 0.01  # spent: answer with what is ready at once
