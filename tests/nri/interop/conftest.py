"""The Go program, built once per test session (skipped with the reason when Go or
Debian's ttrpc sources are absent), and a work directory with a generated machine."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nri.interop import gobuild


@pytest.fixture(scope="session")
def go_binary() -> Iterator[Path]:
    """CRI_RESMGR_NRI_INTEROP_BINARY names a build to use instead (docs/nri.md: the
    one-off check with upstream's multiplexer ran the tests that way)."""
    given = os.environ.get("CRI_RESMGR_NRI_INTEROP_BINARY")
    if given:
        yield Path(given)
        return
    why = gobuild.missing()
    if why is not None:
        if os.environ.get("CI") == "true":  # make deps (scripts/install-deps.sh) installs them: a skip there would hide a broken install
            pytest.fail(f"NRI interop with Go's ttrpc cannot run in CI: {why}")
        pytest.skip(f"NRI interop with Go's ttrpc: {why}")
    gopath = Path(tempfile.mkdtemp(prefix="crirm-nri-go-", dir="/tmp"))
    try:
        yield gobuild.build(gopath)
    finally:
        shutil.rmtree(gopath, ignore_errors=True)

