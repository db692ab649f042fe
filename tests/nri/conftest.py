"""Shared by the NRI tests, tests/nri/interop's included."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import sysfs


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory for a plugin's state, with a generated 1-socket, 4-core, 8-CPU sysfs in `host`."""
    d = Path(tempfile.mkdtemp(prefix="crirm-nri-", dir="/tmp"))
    sysfs.generate(d / "host", sockets=1, cores_per_die=4, threads_per_core=2)
    yield d
    shutil.rmtree(d, ignore_errors=True)
