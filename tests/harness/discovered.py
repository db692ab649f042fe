"""Each machine class of tests/harness/sysfs_classes.py as discovery reads it, made once
per test process and shared: its sysfs tree is written (to tmpfs when there is one: the
4096-CPU class is some 50,000 files, 300 MB on a disk), read by `discover` and removed at
once, so a run leaves nothing behind. Tests only read a Topology."""

from __future__ import annotations

import functools
import os
import tempfile

from cri_resmgr.topology import Topology, discover
from tests.harness.sysfs_classes import CLASSES, write_machine

SHM = "/dev/shm"


def _scratch() -> str | None:
    return SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None


@functools.cache
def discovered(name: str) -> Topology:
    """The class `name` (a key of CLASSES) as `discover` reads it from its generated tree."""
    with tempfile.TemporaryDirectory(prefix="crirm-sysfs-", dir=_scratch()) as root:
        write_machine(root, CLASSES[name]())
        return discover(root)
