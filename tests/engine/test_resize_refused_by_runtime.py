"""A resize the policy decided but the runtime refused (kubelet's UpdateContainerResources
fails): the container keeps its old size when its old CPUs can be had again, and when a
create took them meanwhile, it keeps the new size and is told so, with the others: no CPU
is left running in two places (the static policy, 8 CPUs of which 2 reserved: 6 can be
exclusive, the shared pool is the rest; the CRI double)."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from test_engine_fake_runtime import STATIC, besteffort, guaranteed

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.podspec import LinuxResources, milli_cpu_to_quota, milli_cpu_to_shares

SHAPE = dict(sockets=1, cores_per_die=4, threads_per_core=2)


def resized(milli: int) -> LinuxResources:
    """kubelet's update for a Guaranteed container resized to `milli` CPU."""
    return LinuxResources(cpu_shares=milli_cpu_to_shares(milli), cpu_quota=milli_cpu_to_quota(milli),
                          cpu_period=100000, memory_limit_in_bytes=64 << 20, oom_score_adj=-997)


def cpus(e, cid: str) -> CPUSet:
    return CPUSet(e.fake.cpuset(cid))


def test_refused_resize_puts_the_old_size_back(engine_factory):  # noqa: F811
    e = engine_factory(SHAPE, STATIC)
    be = e.kubelet.start_pod(besteffort("be")).container_ids["c"]
    g = e.kubelet.start_pod(guaranteed("g", "1500m")).container_ids["c"]
    e.flush()
    shared = cpus(e, be)
    assert cpus(e, g) == shared and len(shared) == 8

    e.fake.fail_updates = 1  # kubelet's own update of g fails
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.update_container_resources(g, resized(2000))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    e.flush()
    assert cpus(e, be) == shared and cpus(e, g) == shared  # nothing moved
    policy = e.ctl.active_policy()
    assert {CPUSet(r.cpuset_cpus) for k in policy.assignments() if (r := policy.resources(k)) is not None} \
        == {shared}  # the policy put it back in the shared pool too
    e.kubelet.update_container_resources(g, resized(2000))  # kubelet's retry
    e.flush()
    assert len(cpus(e, g)) == 2 and cpus(e, be) == shared - cpus(e, g)

def test_refused_resize_whose_old_cpus_went_meanwhile_leaves_nothing_double_booked(engine_factory):  # noqa: F811
    e = engine_factory(SHAPE, STATIC)
    be = e.kubelet.start_pod(besteffort("be")).container_ids["c"]
    g = e.kubelet.start_pod(guaranteed("g", "2")).container_ids["c"]
    e.flush()
    assert len(cpus(e, g)) == 2 and len(cpus(e, be)) == 6

    reached, release = threading.Event(), threading.Event()

    async def gate(req) -> bool:
        if req.container_id != g:
            return False
        e.fake.update_gate = None
        reached.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        return True  # refused, once a create has taken the CPU it gave back

    e.fake.update_gate = gate
    failed: list[BaseException] = []

    def shrink() -> None:
        try:
            e.kubelet.update_container_resources(g, resized(1000))  # 2 -> 1: one CPU back to the shared pool
        except grpc.RpcError as x:
            failed.append(x)

    t = threading.Thread(target=shrink)
    t.start()
    assert reached.wait(10)
    other = e.kubelet.start_pod(guaranteed("h", "5")).container_ids["c"]  # takes what g gave back
    release.set()
    t.join(10)
    assert len(failed) == 1 and failed[0].code() == grpc.StatusCode.UNAVAILABLE
    e.flush()

    # g cannot have its 2 CPUs again: it keeps 1, and the runtime is told so.
    mine, theirs, rest = cpus(e, g), cpus(e, other), cpus(e, be)
    assert len(mine) == 1 and len(theirs) == 5 and len(rest) == 2
    assert mine.isdisjoint(theirs) and mine.isdisjoint(rest) and theirs.isdisjoint(rest)
    policy = e.ctl.active_policy()
    placed = {CPUSet(r.cpuset_cpus) for k in policy.assignments() if (r := policy.resources(k)) is not None}
    assert mine in placed and theirs in placed and rest in placed


def test_a_policy_failure_on_a_resize_passes_kubelets_update_fail_open(engine_factory, monkeypatch, caplog):  # noqa: F811
    """A bug in a policy's resize is not kubelet's problem (as on a create): the update goes
    through with the cpuset the container has, counted and logged once; the policy keeps
    the old placement and the record the old size, so a later resize is decided again."""
    from cri_resmgr.engine import resmgr

    e = engine_factory(SHAPE, STATIC)
    be = e.kubelet.start_pod(besteffort("be")).container_ids["c"]
    g = e.kubelet.start_pod(guaranteed("g", "1500m")).container_ids["c"]
    e.flush()
    shared = cpus(e, be)

    def broken(policy, workload, placed):  # type: ignore[no-untyped-def]
        raise RuntimeError("x" * 10_000)

    monkeypatch.setattr(resmgr.policy_resize, "resize", broken)
    e.kubelet.update_container_resources(g, resized(2000))  # does not fail
    e.flush()
    assert e.fake.containers[g]["resources"].cpu_quota == 200000  # kubelet's fields went through
    assert cpus(e, g) == shared and cpus(e, be) == shared  # nothing moved
    assert e.ctl.stats().policy_errors == 1
    lines = [r.getMessage() for r in caplog.records if "failed on resizing" in r.getMessage()]
    assert len(lines) == 1 and len(lines[0]) < 500  # the exception's text clipped

    monkeypatch.undo()
    e.kubelet.update_container_resources(g, resized(2000))  # kubelet's next try is decided
    e.flush()
    assert len(cpus(e, g)) == 2 and cpus(e, be) == shared - cpus(e, g)


def test_a_policy_failure_on_a_resize_fails_kubelets_call_fail_closed(engine_factory, monkeypatch):  # noqa: F811
    from cri_resmgr.engine import resmgr

    e = engine_factory(SHAPE, "policy: {Active: static, ReservedResources: {CPU: 2}, FailClosed: true}\n")
    e.kubelet.start_pod(besteffort("be"))
    g = e.kubelet.start_pod(guaranteed("g", "1500m")).container_ids["c"]

    def broken(policy, workload, placed):  # type: ignore[no-untyped-def]
        raise RuntimeError("x" * 10_000)

    monkeypatch.setattr(resmgr.policy_resize, "resize", broken)
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.update_container_resources(g, resized(2000))
    assert err.value.code() == grpc.StatusCode.INTERNAL and len(err.value.details()) < 300
    assert e.fake.containers[g]["resources"].cpu_quota == 150000  # nothing reached the runtime
