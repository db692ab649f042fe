"""One front end per state directory (cri_resmgr/frontend/statelock.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cri_resmgr.frontend import statelock


def test_a_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    first = statelock.acquire(state, "cri-resmgr relay")
    # Another process (flock is per open file, so a child is the honest test).
    code = ("import sys; from cri_resmgr.frontend import statelock\n"
            "try:\n    statelock.acquire(sys.argv[1], 'cri-resmgr NRI plugin')\n"
            "except statelock.StateDirBusy as e:\n    print(e); sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code, state], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "is in use by cri-resmgr relay (pid" in done.stdout
    first.release()
    again = statelock.acquire(state, "cri-resmgr NRI plugin")
    assert "NRI plugin" in (Path(state) / statelock.LOCK_FILE).read_text()
    again.release()


def test_an_unusable_state_dir_is_one_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(statelock.StateDirError, match=f"state directory {tmp_path}/file/state cannot be used"):
        statelock.acquire(str(tmp_path / "file" / "state"), "test")
    with pytest.raises(statelock.StateDirError, match="exists and is not a directory"):
        statelock.acquire(str(tmp_path / "file"), "test")


def test_the_relay_refuses_a_state_dir_the_nri_plugin_holds(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    held = statelock.acquire(state, "cri-resmgr NRI plugin")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "cri_resmgr.cli", "-relay-socket", str(tmp_path / "relay.sock"),
             "-runtime-socket", str(tmp_path / "no-runtime.sock"), "-config-socket", "-", "-state-dir", state,
             "-runtime-wait-timeout", "30"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    finally:
        held.release()
    assert done.returncode == 1
    assert f"state directory {state} is in use by cri-resmgr NRI plugin (pid" in done.stderr
