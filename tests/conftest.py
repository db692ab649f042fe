"""Shared fixtures: one throwaway containerd per test session, and a
kubelet-like driver bound to it.

Each session gets its own directory (/tmp/crirm-ctd-XXXX) and its own cgroup
root (/crirm-test-XXXX), so concurrent sessions never meet, and the session's
end removes both.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import runtimes
from tests.harness.containerd import Containerd
from tests.harness.kubelet import Kubelet

_NEEDED_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")


def _real_runtime_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run containerd"
    missing = [b for b in _NEEDED_BINARIES if shutil.which(b) is None]
    if missing:
        return f"missing binaries: {', '.join(missing)} (run scripts/install-deps.sh)"
    return None


def _instance_dir(prefix: str) -> Path:
    # Short, under /tmp: the socket path must fit in sun_path (108 bytes),
    # which pytest's tmp_path does not guarantee.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def sockdir() -> Iterator[str]:
    """A fresh directory for unix sockets, removed after the test."""
    path = _instance_dir("cra-")
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def cgroup_root() -> str:
    """A cgroup path owned by this session; pods live below it."""
    return f"/crirm-test-{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def containerd(cgroup_root: str) -> Iterator[Containerd]:
    """The session's throwaway containerd, with the test images imported."""
    reason = _real_runtime_skip_reason()
    if reason:
        pytest.skip(reason)
    instance = Containerd(_instance_dir("crirm-ctd-"), owned_cgroup_roots=[cgroup_root])
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def make_containerd() -> Iterator[Callable[..., Containerd]]:
    """Starts extra, separate instances (each with its own cgroup root, given
    as `.owned_cgroup_roots[0]`); whatever a test leaves running is stopped."""
    reason = _real_runtime_skip_reason()
    if reason:
        pytest.skip(reason)
    made: list[Containerd] = []

    def make(start: bool = True) -> Containerd:
        instance = Containerd(
            _instance_dir("crirm-ctx-"), owned_cgroup_roots=[f"/crirm-test-{secrets.token_hex(4)}"]
        )
        made.append(instance)
        if start:
            instance.start()
        return instance

    yield make
    for instance in made:
        instance.stop()


@pytest.fixture
def kubelet(containerd: Containerd, cgroup_root: str) -> Iterator[Kubelet]:
    """A v1 driver on the session containerd; pods a test leaves are deleted."""
    driver = Kubelet(containerd.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        yield driver
    finally:
        try:
            driver.delete_all_pods()
        finally:
            driver.close()


def _newer_containerd(version: str) -> Iterator[Containerd]:
    """A throwaway containerd of a newer release (tests/harness/runtimes.py), NRI enabled
    (no plugin connected: transparent to CRI clients). Missing: a skip, a failure under
    CI=true (`make deps` fetches it; a skip there would hide a broken install)."""
    why = runtimes.missing_reason(version)
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"containerd {version} cannot run in CI: {why}")
        pytest.skip(why)
    instance = Containerd(_instance_dir("crirm-ctn-"), owned_cgroup_roots=[f"/crirm-test-{secrets.token_hex(4)}"],
                          bin_dir=runtimes.containerd_bin_dir(version), major=runtimes.major(version), nri=True,
                          version=version)
    try:
        instance.start()
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def containerd_17() -> Iterator[Containerd]:
    """containerd 1.7.24 (NRI v0.6), one per session."""
    yield from _newer_containerd(runtimes.CONTAINERD_17)


@pytest.fixture(scope="session")
def containerd_2() -> Iterator[Containerd]:
    """containerd 2.1.9 (CRI v1 only; NRI on by default), one per session."""
    yield from _newer_containerd(runtimes.CONTAINERD_2)


@pytest.fixture
def runtime(request: pytest.FixtureRequest) -> Containerd:
    """The runtime a test runs against: the session's 1.6 unless the test parametrizes it
    indirectly with a version (`@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)`)."""
    version = getattr(request, "param", "1.6")
    fixture = {"1.6": "containerd", runtimes.CONTAINERD_17: "containerd_17", runtimes.CONTAINERD_2: "containerd_2"}
    return request.getfixturevalue(fixture[version])  # type: ignore[no-any-return]
