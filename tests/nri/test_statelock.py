"""One front end per state directory (cri_resmgr/statelock.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cri_resmgr import statelock


def test_a_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    first = statelock.acquire(state, "cri-resmgr relay")
    # Another process (flock is per open file, so a child is the honest test).
    code = ("import sys; from cri_resmgr import statelock\n"
            "try:\n    statelock.acquire(sys.argv[1], 'cri-resmgr NRI plugin')\n"
            "except statelock.StateDirBusy as e:\n    print(e); sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code, state], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "is in use by cri-resmgr relay (pid" in done.stdout
    first.release()
    again = statelock.acquire(state, "cri-resmgr NRI plugin")
    assert "NRI plugin" in (Path(state) / statelock.LOCK_FILE).read_text()
    again.release()


def test_an_unusable_state_dir_is_an_os_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        statelock.acquire(str(tmp_path / "file" / "state"), "test")
