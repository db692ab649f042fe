"""The VM suite's host side (`make test-vm`, docs/vm.md): one boot of the cgroup-v2 guest
per topology (tests/harness/vm.py), each running that topology's tests of tests/vm/guest;
a test here fails with the guest's own output when any of them fails.

When the suite cannot run here (no qemu, not root, no image and no way to build it) each
test says why and skips; under CI=true it fails instead (a skip there would hide a broken
install). CRIRM_VM_TOPOLOGIES=4node,2node picks topologies; CRIRM_VM_PYTEST_ARGS (shell
words) is passed to the guest's pytest, e.g. "-k static -x"."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import vm

# The bound of one boot: image built, the guest's tests of one topology at TCG speed.
BOOT_TIMEOUT = float(os.environ.get("CRIRM_VM_BOOT_TIMEOUT", "2400"))
SELECTED = [t for t in os.environ.get("CRIRM_VM_TOPOLOGIES", "").split(",") if t] or list(vm.TOPOLOGIES)


def _cannot(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the VM suite cannot run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def image() -> Iterator[Path]:
    """The guest image, built now if this checkout's inputs have none yet (minutes)."""
    reason = vm.missing_reason()
    if reason:
        _cannot(reason)
    log = Path(tempfile.mkdtemp(prefix="crirm-vm-build-")) / "build.log"
    start = time.monotonic()
    try:
        built = vm.build_image(log)
    except RuntimeError as e:
        _cannot(str(e))
    print(f"\nVM image {built} ready in {time.monotonic() - start:.0f} s")
    shutil.rmtree(log.parent, ignore_errors=True)
    yield built


@pytest.mark.parametrize("name", SELECTED)
def test_guest_suite(image: Path, name: str) -> None:
    topology = vm.TOPOLOGIES[name]
    results = Path(tempfile.mkdtemp(prefix=f"crirm-vm-{name}-"))
    args = shlex.split(os.environ.get("CRIRM_VM_PYTEST_ARGS", ""))
    start = time.monotonic()
    result = vm.run_guest_suite(image, topology, results, BOOT_TIMEOUT, args)
    elapsed = time.monotonic() - start
    print(f"\n{name} ({topology.description}): {result.counts()} in {elapsed:.0f} s")
    for test, seconds in result.durations():
        print(f"  {seconds:6.0f} s  {test}")
    try:
        assert result.rc is not None and not result.timed_out, result.report()
        # 5: nothing collected for this topology; a topology without tests is a mistake here.
        assert result.rc == 0, result.report()
        print(result.output.splitlines()[-1] if result.output else "")
    finally:
        shutil.rmtree(results, ignore_errors=True)
