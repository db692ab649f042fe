"""The engine with the topology-aware policy against the in-process CRI double: the
policy's own timer (cold start) reaching the runtime through the update path, and live
reconfiguration (kept, moved, or refused with nothing changed)."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_engine_fake_runtime import besteffort, guaranteed

from cri_resmgr.config import ConfigError, parse_document
from cri_resmgr.engine.timers import PolicyTimer
from cri_resmgr.policy.api import Decision
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.podspec import ContainerSpec, PodSpec

TA = "policy: {Active: topology-aware, ReservedResources: {CPU: 1}}\n"
SHAPE = dict(sockets=2, cores_per_die=4, threads_per_core=2, numa_per_socket=2, memory_only_nodes=2)
PREFIX = "cri-resource-manager.intel.com/"


def wait_for(predicate, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_cold_start_moves_memory_to_dram_through_the_update_path(engine_factory):  # noqa: F811
    e = engine_factory(SHAPE, TA)
    # A memory limit: a Burstable container without one gets every node's memory.
    spec = PodSpec(name="cold", annotations={PREFIX + "cold-start": "300ms"},
                   containers=[ContainerSpec(name="c", requests={"cpu": "500m"}, limits={"memory": "64Mi"})])
    h = e.kubelet.start_pod(spec)
    cid = h.container_ids["c"]
    mems = e.fake.containers[cid]["resources"].cpuset_mems
    assert mems in ("4", "5"), f"cold: memory on the PMEM node, got {mems!r}"
    wait_for(lambda: e.fake.containers[cid]["resources"].cpuset_mems not in ("4", "5"), "the cold start to end")
    # No CPU limit: placed no lower than a package (UnlimitedBurstable), so its package's DRAM.
    assert e.fake.containers[cid]["resources"].cpuset_mems in ("0-1", "2-3")
    assert e.ctl.active_policy().next_deadline() is None


def test_reconfiguration_moves_what_must_and_refuses_what_cannot_fit(engine_factory):  # noqa: F811
    e = engine_factory(SHAPE, "policy: {Active: topology-aware}\n")
    handles = {f"g{i}": e.kubelet.start_pod(guaranteed(f"g{i}", "2")) for i in range(4)}
    watcher = e.kubelet.start_pod(besteffort("watcher"))
    e.flush()
    cpus = {n: CPUSet.parse(e.fake.cpuset(h.container_ids["c"])) for n, h in handles.items()}
    socket0 = CPUSet.parse("0-7")  # linear numbering: socket 0 is CPUs 0-7
    # 4 x 2 exclusive CPUs cannot fit 6 CPUs that must also keep one for the watcher: refused.
    with pytest.raises(ConfigError, match="do not fit"):
        e.loop.run(e.ctl.apply(parse_document(
            "policy: {Active: topology-aware, AvailableResources: {CPU: 'cpuset:0-5'}}\n", "t", e.registry.names())))
    e.flush()
    assert {n: CPUSet.parse(e.fake.cpuset(h.container_ids["c"])) for n, h in handles.items()} == cpus, "nothing changed"
    e.kubelet.delete_pod(handles.pop("g3"))
    e.flush()
    kept = {n: c for n, c in cpus.items() if c.issubset(socket0) and n in handles}
    e.loop.run(e.ctl.apply(parse_document(
        "policy: {Active: topology-aware, AvailableResources: {CPU: 'cpuset:0-7'}}\n", "t", e.registry.names())))
    e.flush()
    after = {n: CPUSet.parse(e.fake.cpuset(h.container_ids["c"])) for n, h in handles.items()}
    for name, c in after.items():
        assert len(c) == 2 and c.issubset(socket0), name
    for name, c in kept.items():
        assert after[name] == c, f"{name} could stay but moved"
    assert CPUSet.parse(e.fake.cpuset(watcher.container_ids["c"])) == socket0 - CPUSet().union(*after.values())


def test_timer_is_a_no_op_for_policies_without_the_hook():
    class Plain:
        pass

    async def fire():
        raise AssertionError("never")

    async def run():
        t = PolicyTimer(Plain(), fire)
        t.rearm()
        assert t.armed_for is None

    asyncio.run(run())


def test_timer_arms_for_the_earliest_deadline_and_fires():
    fired = []

    class Timed:
        deadline = 100.0

        def next_deadline(self):
            return self.deadline

        def expire(self, now):
            return Decision()

    async def run():
        now = [99.95]
        done = asyncio.Event()

        async def fire():
            fired.append(now[0])
            done.set()

        policy = Timed()
        t = PolicyTimer(policy, fire, clock=lambda: now[0])
        t.rearm()
        assert t.armed_for == 100.0
        policy.deadline = None
        t.rearm()
        assert t.armed_for is None
        policy.deadline = 100.0
        t.rearm()
        await asyncio.wait_for(done.wait(), 10)
        assert t.armed_for is None
        t.cancel()

    asyncio.run(run())
    assert fired == [99.95]


def test_start_up_with_containers_that_no_longer_fit_places_them_anew(engine_factory):  # noqa: F811
    e = engine_factory(SHAPE, "policy: {Active: topology-aware}\n")
    for i in range(4):
        e.kubelet.start_pod(guaranteed(f"g{i}", "2"))
    e.flush()
    e.loop.run(e.relay.stop(1))
    e.loop.run(e.ctl.close())
    # The configuration changed while the relay was down: refusing would leave the node
    # without a relay, so everything is placed anew (best effort, with warnings).
    e.start_relay("policy: {Active: topology-aware, AvailableResources: {CPU: 'cpuset:0-5'}}\n")
    e.flush()
    policy = e.ctl.active_policy()
    assignments = policy.assignments()
    assert len(assignments) == 4
    assert all(e.fake.cpuset(cid) and CPUSet.parse(e.fake.cpuset(cid)).issubset(CPUSet.parse("0-5"))
               for cid in e.fake.live())
    assert sum(len(a.exclusive) for a in assignments.values()) <= 5


def test_cancelled_timer_stays_off():
    class Timed:
        def next_deadline(self):
            return 0.0

    async def fire():
        raise AssertionError("a cancelled timer must not fire")

    async def run():
        t = PolicyTimer(Timed(), fire, clock=lambda: 1.0)
        t.rearm()
        assert t.armed_for == 0.0
        t.cancel()
        t.rearm()  # retired: stays off
        assert t.armed_for is None
        await asyncio.sleep(0.05)

    asyncio.run(run())


def test_only_a_policy_with_deadlines_has_a_timer():
    from cri_resmgr.engine.timers import has_deadlines

    class Plain:
        pass

    class Deadlines:
        def next_deadline(self) -> float | None:
            return None

        def expire(self, now: float) -> Decision:
            return Decision()

    class HalfOfIt:  # a deadline it could never act on is no timer either
        def next_deadline(self) -> float | None:
            return 1.0

    assert not has_deadlines(Plain())
    assert has_deadlines(Deadlines())
    assert not has_deadlines(HalfOfIt())
