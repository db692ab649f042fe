"""One front end per state directory: the relay and the NRI plugin both take an
exclusive lock on STATE_DIR/lock for as long as they run.

Two of them managing one node would each hand out the same CPUs. The lock is an
flock(2) on an open file: the kernel drops it when the process ends, however it
ends, so a crash leaves nothing to clean up. The holder's pid and front end are
written into the file for the message that refuses the second one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cri_resmgr.errors import CriResmgrError

LOCK_FILE = "lock"


class StateDirError(CriResmgrError):
    """The state directory cannot be used (not a directory, cannot be created or locked)."""


class StateDirBusy(StateDirError):
    """Another cri-resmgr process holds the state directory."""


class StateLock:
    def __init__(self, fd: int, path: Path):
        self._fd = fd
        self.path = path

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def acquire(state_dir: str, front_end: str) -> StateLock:
    """The lock on `state_dir` (created, mode 0700, if missing); raises StateDirBusy
    naming the holder, or StateDirError when the directory cannot be used."""
    directory = Path(state_dir)
    path = directory / LOCK_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:  # a file of that name, /proc, a read-only mount: one line naming it
        what = "exists and is not a directory" if directory.exists() and not directory.is_dir() else \
            (e.strerror or str(e)).lower()
        raise StateDirError(f"state directory {state_dir} cannot be used: {what} "
                            f"({e.filename or state_dir}); give another -state-dir") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise StateDirBusy(f"state directory {state_dir} is in use by {holder}: only one cri-resmgr "
                           "front end (the CRI relay or the NRI plugin) may manage a node; stop it first, "
                           "or give this one another -state-dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{front_end} (pid {os.getpid()})\n".encode(), 0)
    return StateLock(fd, path)
