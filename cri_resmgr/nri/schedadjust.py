"""A scheduling class as NRI's adjustment of a new container (NRI v0.11+:
`linux.scheduler`, `linux.io_priority`), for the runtime to apply from creation. A
runtime before v0.11 (containerd 2.1.9) skips the fields; the engine sets the class on
the container's threads after StartContainer either way (engine/nodectl.py)."""

from __future__ import annotations

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.policy.schedclass import SchedClass

POLICIES = {"other": api.SCHED_OTHER, "fifo": api.SCHED_FIFO, "rr": api.SCHED_RR, "batch": api.SCHED_BATCH,
            "idle": api.SCHED_IDLE, "deadline": api.SCHED_DEADLINE}
FLAGS = {"reset-on-fork": api.SCHED_FLAG_RESET_ON_FORK, "reclaim": api.SCHED_FLAG_RECLAIM,
         "dl-overrun": api.SCHED_FLAG_DL_OVERRUN, "keep-policy": api.SCHED_FLAG_KEEP_POLICY,
         "keep-params": api.SCHED_FLAG_KEEP_PARAMS}
IO_CLASSES = {"rt": api.IOPRIO_CLASS_RT, "be": api.IOPRIO_CLASS_BE, "idle": api.IOPRIO_CLASS_IDLE}


def adjust(linux: api.LinuxContainerAdjustment, cls: SchedClass) -> None:
    """What of `cls` NRI can say: the policy (with priority, nice, flags and the deadline
    parameters, in the OCI spec's nanoseconds) and the I/O priority."""
    if cls.policy != "none":
        s = linux.scheduler
        s.policy = POLICIES[cls.policy]
        s.priority = cls.priority
        s.nice = cls.nice or 0
        s.flags.extend(FLAGS[f] for f in cls.flags)
        if cls.policy == "deadline":
            s.runtime = cls.runtime_us * 1000
            s.deadline = cls.deadline_us * 1000
            s.period = (cls.period_us or cls.deadline_us) * 1000
    if cls.io_class != "none":
        linux.io_priority.SetInParent()
        linux.io_priority.priority = cls.io_priority if cls.io_class != "idle" else 0
        setattr(linux.io_priority, "class", IO_CLASSES[cls.io_class])  # `class`: a Python keyword
