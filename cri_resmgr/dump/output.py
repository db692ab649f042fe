"""The dump file: reopened on request (logrotate's SIGHUP), with an optional size cap.

Used only on the dumper's writer thread. When a write takes the file past the cap,
the file is renamed to PATH.1 (replacing an older one) and a new PATH is started, so
a dump left running never takes more than about twice the cap on disk.
"""

from __future__ import annotations

import os
from typing import TextIO

FILE_MODE = 0o600  # dumps hold container environments and command lines


def open_private(path: str) -> TextIO:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    return os.fdopen(fd, "a", encoding="utf-8")


class DumpFile:
    def __init__(self, path: str, max_size: int | None = None) -> None:
        if max_size is not None and max_size <= 0:
            raise ValueError(f"dump file size cap must be positive, got {max_size!r}")
        self.path = path
        self.max_size = max_size
        self._out = open_private(path)
        self._size = os.fstat(self._out.fileno()).st_size
        self.rotations = 0

    def write(self, text: str) -> int:
        n = self._out.write(text)
        if self.max_size is not None:
            self._size += len(text.encode("utf-8", "replace"))
            if self._size >= self.max_size:
                self._rotate()
        return n

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.close()

    def reopen(self) -> None:
        """Closes and opens PATH again: after logrotate moved it, writes go to the new file."""
        self._out.close()
        self._out = open_private(self.path)
        self._size = os.fstat(self._out.fileno()).st_size

    def _rotate(self) -> None:
        self._out.close()
        os.replace(self.path, self.path + ".1")
        self.rotations += 1
        self._out = open_private(self.path)
        self._size = 0
