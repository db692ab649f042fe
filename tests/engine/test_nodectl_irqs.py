"""The engine's IRQ control for the static policy on a kernel-like /proc tree: the
controllable IRQs leave a Guaranteed container's exclusive CPUs and come back when it
goes; an IRQ outside the list is never written; a policy without the list gives every IRQ
back; shutdown restores the rest."""

from __future__ import annotations

import asyncio

from cri_resmgr.classes.hostfs import HostRoot
from cri_resmgr.classes.sched import Syscalls
from cri_resmgr.engine.nodectl import NodeControl
from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.static import StaticPolicy
from tests.harness.procirq import affinities, kernel_like_proc
from tests.topology.shapes import machine


def _static(irqs: list[str] | None):
    options = {"ControllableInterrupts": irqs} if irqs is not None else {}
    return StaticPolicy(build_context(machine(cores=8, threads=1), reserved=1, options=options))


def _guaranteed(key: str, cpus: int) -> Workload:
    return Workload(key=key, namespace="default", pod=key, name="c", qos=QoS.GUARANTEED, cpu_request=cpus * 1000,
                    cpu_limit=cpus * 1000)


def test_irqs_follow_exclusive_cpus_and_come_back(tmp_path):
    kernel_like_proc(tmp_path, 10, cpus=8)
    policy = _static(["24-28"])
    topo = machine(cores=8, threads=1)
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None, online=lambda: topo.online)  # type: ignore[arg-type]

    async def main() -> None:
        node.irqs(policy)
        await asyncio.sleep(0)
        d = policy.allocate(_guaranteed("g", 2))
        exclusive = d.resources.cpuset_cpus
        node.irqs(policy)
        while node._task is not None and not node._task.done():  # the round in its thread
            await asyncio.sleep(0.01)
        now = affinities(tmp_path)
        assert {now[n] for n in range(24, 29)} == {str(topo.online - exclusive)}
        assert {now[n] for n in range(29, 34)} == {"0-7"}  # outside the list: never written
        policy.release("g")
        node.irqs(policy)
        while node._task is not None and not node._task.done():
            await asyncio.sleep(0.01)
        assert set(affinities(tmp_path).values()) == {"0-7"}
        policy.allocate(_guaranteed("h", 1))
        node.irqs(policy)
        await node.close()  # shutdown: back as they were
        assert set(affinities(tmp_path).values()) == {"0-7"}

    asyncio.run(main())
    # 5 moved, 5 back; the round h's placement asked for is dropped by the shutdown, which
    # finds every IRQ as it was: nothing more written.
    assert node.stats().irq_writes == 10


def test_a_policy_without_the_list_gives_every_irq_back(tmp_path):
    kernel_like_proc(tmp_path, 4, cpus=8)
    topo = machine(cores=8, threads=1)
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None, online=lambda: topo.online)  # type: ignore[arg-type]
    policy = _static(["24-27"])
    policy.allocate(_guaranteed("g", 3))
    node.irqs(policy)  # no event loop: done at once
    assert len(set(affinities(tmp_path).values()) - {"0-7"}) == 1
    node.irqs(_static(None))
    assert set(affinities(tmp_path).values()) == {"0-7"}


def test_state_shows_the_irqs_and_status_the_sched_column(tmp_path):
    from cri_resmgr.engine.snapshot import take
    from cri_resmgr.status.text import _table
    from cri_resmgr.status.view import _row

    kernel_like_proc(tmp_path, 2, cpus=8)
    topo = machine(cores=8, threads=1)
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None, online=lambda: topo.online)  # type: ignore[arg-type]
    policy = _static(["24"])
    policy.allocate(_guaranteed("g", 1))
    node.irqs(policy)
    doc = take("static", policy, None, None, None, False, irqs=node.irq_affinity()).to_document()
    assert doc["irq_affinity"] == {"24": str(affinities(tmp_path)[24])} and affinities(tmp_path)[25] == "0-7"
    c = {"namespace": "n", "pod": "p", "name": "c", "qos": "Guaranteed", "requests": {"cpu_milli": 1000},
         "pool": "shared", "exclusive_cpus": "", "shared_cpus": "1", "mems": "0", "id": "abc",
         "sched_class": "realtime"}
    lines = _table([_row(c, "c")], colour=False)
    assert "SCHED" in lines[0] and "realtime" in lines[1]


def _moved_then_killed(tmp_path, saved) -> None:
    """A run that moves IRQs 24-27 off a Guaranteed container's CPUs and ends without its
    shutdown (SIGKILL): nothing given back."""
    topo = machine(cores=8, threads=1)
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None, online=lambda: topo.online,  # type: ignore[arg-type]
                       saved=str(saved))
    policy = _static(["24-27"])
    policy.allocate(_guaranteed("g", 3))
    node.irqs(policy)  # no event loop: done at once
    assert len(set(affinities(tmp_path).values()) - {"0-7"}) == 1
    assert saved.exists()


def test_a_restart_after_a_crash_gives_the_irqs_back_without_the_list(tmp_path):
    kernel_like_proc(tmp_path, 4, cpus=8)
    saved = tmp_path / "state" / "irq-originals.json"
    _moved_then_killed(tmp_path, saved)
    topo = machine(cores=8, threads=1)
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None, online=lambda: topo.online,  # type: ignore[arg-type]
                       saved=str(saved))
    node.irqs(_static(None))  # the next start's first decision, under a policy without the list
    assert set(affinities(tmp_path).values()) == {"0-7"}
    assert not saved.exists()


def test_a_restart_after_a_crash_takes_the_first_runs_originals(tmp_path):
    kernel_like_proc(tmp_path, 4, cpus=8)
    saved = tmp_path / "state" / "irq-originals.json"
    _moved_then_killed(tmp_path, saved)
    topo = machine(cores=8, threads=1)
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None, online=lambda: topo.online,  # type: ignore[arg-type]
                       saved=str(saved))
    policy = _static(["24-27"])  # the same list; the container is gone
    node.irqs(policy)  # the IRQs' own CPUs are those of before the first run, not what it wrote
    assert set(affinities(tmp_path).values()) == {"0-7"}
    policy.allocate(_guaranteed("h", 2))
    node.irqs(policy)
    assert len(set(affinities(tmp_path).values()) - {"0-7"}) == 1

    async def shutdown() -> None:
        await node.close()
    asyncio.run(shutdown())
    assert set(affinities(tmp_path).values()) == {"0-7"}
    assert not saved.exists()  # all given back: nothing held
