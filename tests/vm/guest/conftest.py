"""The guest side of the VM suite: runs inside the cgroup-v2 guest that tests/harness/vm.py
boots, one boot per topology (CRIRM_VM_TOPOLOGY). A test says where it runs with
`@pytest.mark.topologies("4node", ...)` (unmarked: 4node); the others are deselected, not
skipped, as they were never meant for this machine.

Guest code runs 10-35x slower than on the host (TCG): every wait here is bounded but long,
and nothing is timed."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.harness import runtimes
from tests.harness.containerd import Containerd
from tests.harness.kubelet import Kubelet

TOPOLOGY = os.environ.get("CRIRM_VM_TOPOLOGY", "")
DEFAULT_TOPOLOGY = "4node"
# Bounds for the slow guest (the host-side harness defaults suit the host).
START_TIMEOUT = 240.0
RPC_TIMEOUT = 240.0
RUNTIMES = ("1.6", runtimes.CONTAINERD_2)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "topologies(*names): the VM topologies a guest test runs on")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("topologies")
        wanted = marker.args if marker else (DEFAULT_TOPOLOGY,)
        (keep if TOPOLOGY in wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()
_RUNTIME_LOGS = pytest.StashKey[list[Path]]()  # every runtime's log, for a failed test's copy
# Where a failed test's logs go for the host to show (the results share, scripts/vm/guest-run.sh).
FAILED_LOGS = Path("/run/crirm-results/failed")


@pytest.fixture
def workdir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory for the test's front end (its log, state, configuration); a failed test's
    copied to the results share, as the guest's /tmp goes with it."""
    d = Path(tempfile.mkdtemp(prefix="crirm-vm-", dir="/tmp"))
    yield d
    if request.node.stash.get(_FAILED, False) and FAILED_LOGS.parent.is_dir():
        name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in request.node.name)
        out = FAILED_LOGS / name
        shutil.copytree(d, out, ignore=shutil.ignore_patterns("*.sock", "*.yaml", "state*"), dirs_exist_ok=True)
        for i, log in enumerate(request.config.stash.get(_RUNTIME_LOGS, [])):
            if log.exists():  # a stopped runtime's directory is gone
                shutil.copyfile(log, out / f"containerd-{i}.log")
        dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout
        (out / "dmesg.log").write_text(dmesg)
    shutil.rmtree(d, ignore_errors=True)


def new_runtime(config: pytest.Config, version: str = "1.6", driver: str = "cgroupfs") -> Containerd:
    """A started throwaway containerd ("1.6": the image's Debian package; 2.1.9: the release
    unpacked into the image), NRI on for 2.x, its pods' cgroups under a root of its own
    (`.owned_cgroup_roots[0]`; with the systemd cgroup driver a slice). The caller stops it."""
    token = secrets.token_hex(4)
    root = f"/crirmvm{token}.slice" if driver == "systemd" else f"/crirm-vm-{token}"
    kwargs: dict[str, object] = {}
    if version != "1.6":
        why = runtimes.missing_reason(version)
        if why:
            pytest.fail(f"the image lacks containerd {version}: {why}")
        kwargs = {"bin_dir": runtimes.containerd_bin_dir(version), "major": runtimes.major(version),
                  "nri": True, "version": version}
    instance = Containerd(Path(tempfile.mkdtemp(prefix="crirm-ctd-", dir="/tmp")), owned_cgroup_roots=[root],
                          systemd_cgroup=driver == "systemd", **kwargs)  # type: ignore[arg-type]
    config.stash.setdefault(_RUNTIME_LOGS, []).append(instance.layout.log)
    try:
        instance.start(timeout=START_TIMEOUT)
    except BaseException:
        instance.stop()
        raise
    return instance


@pytest.fixture
def make_runtime(pytestconfig: pytest.Config) -> Iterator[Callable[..., Containerd]]:
    """make_runtime(version, driver="cgroupfs"): new_runtime's, stopped after the test."""
    made: list[Containerd] = []

    def make(version: str = "1.6", driver: str = "cgroupfs") -> Containerd:
        made.append(new_runtime(pytestconfig, version, driver))
        return made[-1]

    yield make
    for instance in made:
        instance.stop()


@pytest.fixture(scope="session")
def shared_runtime(pytestconfig: pytest.Config) -> Iterator[Callable[[str], Containerd]]:
    """shared_runtime(version): one cgroupfs-driver containerd of each version for the whole
    boot (a start costs tens of seconds here); a test deletes the pods it made."""
    made: dict[str, Containerd] = {}

    def get(version: str) -> Containerd:
        if version not in made:
            made[version] = new_runtime(pytestconfig, version)
        return made[version]

    yield get
    for instance in made.values():
        instance.stop()


class GuestKubelet(Kubelet):
    """The kubelet driver, retrying a StopContainer that containerd 2.1.9 failed with
    "ttrpc: closed" (its connection to the shim dropped at TCG speed), as kubelet's pod workers
    retry a failed stop: seen in teardowns only, it is no finding of the product's."""

    def stop_container(self, container_id: str, timeout: int | None = None) -> None:
        for attempt in range(3):
            try:
                super().stop_container(container_id, timeout)
                return
            except grpc.RpcError as e:
                if "ttrpc: closed" not in str(e.details()) or attempt == 2:
                    raise
                time.sleep(2)


def kubelet_for(address: str, runtime: Containerd) -> Kubelet:
    """A kubelet-like driver whose pods live under `runtime`'s own cgroup root, in the form
    of its cgroup driver."""
    root = runtime.owned_cgroup_roots[0]
    if runtime.systemd_cgroup:
        return GuestKubelet(address, cgroup_root=root.strip("/").removesuffix(".slice"), cgroup_driver="systemd",
                            rpc_timeout=RPC_TIMEOUT)
    return GuestKubelet(address, cgroup_root=f"{root}/kubepods", rpc_timeout=RPC_TIMEOUT)
