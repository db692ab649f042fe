"""Shared by the NRI tests, tests/nri/interop's included."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import runtimes, sysfs
from tests.harness.containerd import Containerd


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory for a plugin's state, with a generated 1-socket, 4-core, 8-CPU sysfs in `host`."""
    d = Path(tempfile.mkdtemp(prefix="crirm-nri-", dir="/tmp"))
    sysfs.generate(d / "host", sockets=1, cores_per_die=4, threads_per_core=2)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# -- real runtimes: containerd 1.7.24 and 2.1.9 with NRI enabled -----------------------------

REAL_VERSIONS = (runtimes.CONTAINERD_17, runtimes.CONTAINERD_2)


@pytest.fixture(scope="session", params=REAL_VERSIONS, ids=lambda v: f"containerd-{v}")
def nri_containerd(request: pytest.FixtureRequest) -> Containerd:
    """The session's containerd 1.7.24 or 2.1.9 (tests/conftest.py), NRI enabled (its own
    socket, plugin and plugin-config directories under the instance's directory)."""
    fixture = {runtimes.CONTAINERD_17: "containerd_17", runtimes.CONTAINERD_2: "containerd_2"}[request.param]
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]
