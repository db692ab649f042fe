"""The plugin service's hooks in-process (cri_resmgr/nri/hooks.py): what the
runtime gets when the engine fails or is slow, and how NRI events become the
engine's CRI calls."""

from __future__ import annotations

import asyncio

from google.protobuf.message import Message

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.nri.hooks import Hooks, event_mask
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.transport.contract import InterceptError, Request
from tests.nri.runtime_double import container, guaranteed, pod


async def _nothing() -> None:
    return None


def _hooks(interceptors: dict, sent: list[api.ContainerUpdate] | None = None) -> Hooks:
    runtime = NriRuntime("test.sock")

    async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
        if sent is not None:
            sent.extend(updates)
        return []

    runtime.connected(send)
    hooks = Hooks(runtime, _nothing)
    hooks.reconfigure(interceptors=interceptors)
    return hooks


def _create_request() -> api.CreateContainerRequest:
    return api.CreateContainerRequest(pod=pod("g", "guaranteed"), container=guaranteed("g1", "g", 2))


def test_event_mask_has_a_bit_per_subscribed_event() -> None:
    assert event_mask((api.RUN_POD_SANDBOX, api.CREATE_CONTAINER)) == 0b1001


def test_the_engine_sees_the_event_as_the_cri_call_it_stands_for() -> None:
    seen: list[Request] = []

    async def create(req: Request) -> Message:
        seen.append(req)
        m = req.message
        assert isinstance(m, pb.CreateContainerRequest)
        m.config.linux.resources.cpuset_cpus = "2-3"
        return await req.forward(m)

    reply = asyncio.run(_hooks({"CreateContainer": create}).create_container(_create_request()))
    m = seen[0].message
    assert isinstance(m, pb.CreateContainerRequest)
    assert (seen[0].name, m.pod_sandbox_id, m.config.metadata.name) == ("CreateContainer", "g", "ctr-g1")
    assert m.sandbox_config.linux.cgroup_parent == "/kubepods/podg"
    r = m.config.linux.resources
    assert (r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes) == (2048, 200000, 100000, 1 << 28)
    assert reply.adjust.linux.resources.cpu.cpus == "2-3"


def test_a_failing_policy_leaves_the_adjustment_empty_and_is_counted() -> None:
    async def broken(req: Request) -> Message:
        raise InterceptError(13, "policy exploded")  # type: ignore[arg-type]

    async def buggy(req: Request) -> Message:
        raise KeyError("bug")

    hooks = _hooks({"CreateContainer": broken, "StopContainer": buggy})
    reply = asyncio.run(hooks.create_container(_create_request()))
    assert reply == api.CreateContainerResponse()
    stopped = asyncio.run(hooks.stop_container(api.StopContainerRequest(pod=pod("g"), container=container("g1", "g"))))
    assert stopped == api.StopContainerResponse()
    assert (hooks.counts.calls, hooks.counts.failed) == (2, 2)


def test_a_slow_decision_gets_an_empty_reply_in_time_and_goes_out_later() -> None:
    sent: list[api.ContainerUpdate] = []
    decided: list[bool] = []

    async def slow(req: Request) -> Message:
        await asyncio.sleep(0.3)
        decided.append(True)
        m = req.message
        assert isinstance(m, pb.CreateContainerRequest)
        m.config.linux.resources.cpuset_cpus = "4-5"
        return await req.forward(m)

    async def main() -> tuple[api.CreateContainerResponse, bool]:
        hooks = _hooks({"CreateContainer": slow}, sent)
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

    async def create(r: Request) -> Message:
        m = r.message
        assert isinstance(m, pb.CreateContainerRequest)
        m.config.linux.resources.cpuset_cpus = "1"
        return await r.forward(m)

    reply = asyncio.run(_hooks({"CreateContainer": create}).create_container(req))
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
    hooks = _hooks({})
    hooks.request_timeout = 2.0

    async def main() -> float:
        await hooks.synchronize(api.SynchronizeRequest(pods=[pod("p1")], more=True))
        return hooks._sync_started

    started = asyncio.run(main())
    assert hooks.sync_deadline(started) == 1.5  # HOOK_SHARE of 2 s
    assert abs(hooks.sync_deadline(started + 1.0) - 0.5) < 1e-9
    assert hooks.sync_deadline(started + 5.0) == 0.01  # spent: answer with what is ready at once
