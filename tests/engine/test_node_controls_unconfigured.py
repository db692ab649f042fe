"""A node without CPU classes, scheduling classes or controllable IRQs pays about nothing
per decision for them: the engine's hooks (CpuClassControl.decided, NodeControl.irqs,
called after every decision; `tuned`, also on every StartContainer) ask the policy at most
whether it tunes. Before, each asked `isinstance` of a runtime-checkable protocol, which
looks every member of it up on the policy: ~45 us a decision for the two, several times
a static decision's own p50 (tests.bench --only policy: 7.6 us). Counted, not timed."""

from __future__ import annotations

from cri_resmgr.classes.hostfs import HostRoot
from cri_resmgr.classes.sched import Syscalls
from cri_resmgr.engine.cache import Cache
from cri_resmgr.engine.cpuclasses import CpuClassControl
from cri_resmgr.engine.nodectl import NodeControl, tuned
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.static import StaticPolicy
from tests.topology.shapes import machine


class _Counting(StaticPolicy):
    """Records the public names looked up on it."""

    seen: list[str]

    def __getattribute__(self, name: str) -> object:
        if not name.startswith("_") and name != "seen":
            object.__getattribute__(self, "seen").append(name)
        return super().__getattribute__(name)


def test_the_hooks_ask_a_policy_without_any_of_it_only_whether_it_tunes(tmp_path):
    topo = machine(cores=8, threads=1)
    policy = _Counting(build_context(topo, reserved=1, options={}))
    policy.seen = []
    cpu = CpuClassControl(HostRoot(str(tmp_path)))
    cpu.switch(cpu.prepare(policy, lambda: topo, "test"))
    node = NodeControl(HostRoot(str(tmp_path)), Syscalls(), runtime=None,  # type: ignore[arg-type]
                       online=lambda: topo.online)
    policy.seen.clear()
    for _ in range(3):  # three decisions
        cpu.decided(policy, Cache(None))
        node.irqs(policy)
    assert tuned(policy) is None
    assert set(policy.seen) <= {"tunes"}, policy.seen
    assert len(policy.seen) == 4  # once a decision (irqs), once for tuned()


def test_a_policy_that_tunes_is_still_seen(tmp_path):
    policy = StaticPolicy(build_context(machine(cores=8, threads=1), reserved=1,
                                        options={"ControllableInterrupts": ["24"]}))
    assert tuned(policy) is policy
