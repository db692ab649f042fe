"""-nri-runtime-classes: the plugin names a new container's scheduling class in its
adjustment as NRI v0.11 spells it (linux.scheduler, linux.io_priority, at v0.11's field
numbers, so that a v0.11 runtime reads them and an older one skips them)."""

from __future__ import annotations

import asyncio

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.engine.core import Bystander
from cri_resmgr.nri.hooks import Hooks
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.policy.schedclass import SchedClass
from tests.nri.runtime_double import container, pod


async def _nothing() -> None:
    return None


class _Core(Bystander):
    @property
    def events(self) -> frozenset[str]:
        return frozenset({"CreateContainer"})


def _reply(sched_of) -> api.CreateContainerResponse:
    hooks = Hooks(NriRuntime("test.sock"), _nothing)
    hooks.reconfigure(engine=_Core())
    hooks.sched_of = sched_of
    request = api.CreateContainerRequest(pod=pod("p", "besteffort"), container=container("c1", "p"))
    return asyncio.run(hooks.create_container(request))


def test_the_class_is_the_adjustments_scheduler_and_io_priority() -> None:
    cls = SchedClass("rt", policy="fifo", priority=42, nice=-2, flags=("reset-on-fork",), io_class="rt",
                     io_priority=3)
    linux = _reply(lambda cid: cls).adjust.linux
    s = linux.scheduler
    assert (s.policy, s.priority, s.nice, list(s.flags)) == (api.SCHED_FIFO, 42, -2, [api.SCHED_FLAG_RESET_ON_FORK])
    assert (getattr(linux.io_priority, "class"), linux.io_priority.priority) == (api.IOPRIO_CLASS_RT, 3)
    # NRI v0.11's field numbers: io_priority 5, scheduler 10 of LinuxContainerAdjustment.
    fields = api.LinuxContainerAdjustment.DESCRIPTOR.fields_by_name
    assert (fields["io_priority"].number, fields["scheduler"].number) == (5, 10)


def test_deadline_in_nanoseconds_and_no_class_no_fields() -> None:
    dl = SchedClass("dl", policy="deadline", runtime_us=2000, deadline_us=10000, io_class="idle")
    linux = _reply(lambda cid: dl).adjust.linux
    assert (linux.scheduler.runtime, linux.scheduler.deadline, linux.scheduler.period) == \
        (2_000_000, 10_000_000, 10_000_000)
    assert getattr(linux.io_priority, "class") == api.IOPRIO_CLASS_IDLE
    none = _reply(lambda cid: None).adjust.linux
    assert not none.HasField("scheduler") and not none.HasField("io_priority")
    only_nice = _reply(lambda cid: SchedClass("n", nice=5)).adjust.linux
    assert not only_nice.HasField("scheduler")  # Policy none: left to the runtime's default
