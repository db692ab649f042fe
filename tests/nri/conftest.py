"""Shared by the NRI tests, tests/nri/interop's included."""

from __future__ import annotations

import os
import secrets
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
def nri_containerd(request: pytest.FixtureRequest) -> Iterator[Containerd]:
    """One throwaway containerd of each newer release per session, NRI enabled (its own
    socket, plugin and plugin-config directories under the instance's directory).
    Missing (not fetched by `make deps`): a skip, a failure under CI=true."""
    version: str = request.param
    why = runtimes.missing_reason(version)
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"containerd {version} cannot run in CI: {why}")
        pytest.skip(why)
    instance = Containerd(Path(tempfile.mkdtemp(prefix="crirm-nri-ctd-", dir="/tmp")),
                          owned_cgroup_roots=[f"/crirm-test-{secrets.token_hex(4)}"],
                          bin_dir=runtimes.containerd_bin_dir(version), major=runtimes.major(version), nri=True,
                          version=version)
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()
