"""The narrow interface through which the class controllers touch the host: files
under one root (`-host-root`), read whole and written in one write(2) each, as cgroup
and resctrl files want. Tests hand the controllers a tree of their own."""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from typing import Protocol

log = logging.getLogger(__name__)


class HostFiles(Protocol):
    """Paths are relative to the host root ("sys/fs/resctrl/info")."""

    def show(self, rel: str) -> str: ...  # the full path, for messages
    def read(self, rel: str) -> str | None: ...  # None: no such file
    def write(self, rel: str, text: str) -> None: ...  # one write(2); raises OSError
    def exists(self, rel: str) -> bool: ...
    def listdir(self, rel: str) -> list[str]: ...  # [] when missing
    def mkdir(self, rel: str) -> None: ...
    def rmdir(self, rel: str) -> None: ...
    def glob(self, pattern: str) -> list[str]: ...  # relative paths matching an absolute glob
    def block_device(self, rel: str) -> tuple[int, int] | None: ...  # (major, minor) of a block device


class HostRoot:
    """The real files under `root` (`/` on a node)."""

    def __init__(self, root: str = "/"):
        self.root = root or "/"

    def _path(self, rel: str) -> str:
        parts = [p for p in rel.split("/") if p and p != "."]
        if ".." in parts:  # paths built from runtime replies never climb out of the root
            raise OSError(f"refusing a path with '..': {rel}")
        return os.path.join(self.root, *parts)

    def show(self, rel: str) -> str:
        return self._path(rel)

    def read(self, rel: str) -> str | None:
        try:
            with open(self._path(rel), encoding="utf-8", errors="replace") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write(self, rel: str, text: str) -> None:
        # O_TRUNC as the shell's `echo >`: the kernel's files ignore it, and a tree standing in
        # for them (-host-root in tests) then holds what was written, not its tail too.
        fd = os.open(self._path(rel), os.O_WRONLY | os.O_TRUNC)
        try:
            data = text.encode()
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {self._path(rel)}")
        finally:
            os.close(fd)

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._path(rel))

    def listdir(self, rel: str) -> list[str]:
        try:
            return sorted(os.listdir(self._path(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def mkdir(self, rel: str) -> None:
        os.mkdir(self._path(rel), 0o755)

    def rmdir(self, rel: str) -> None:
        os.rmdir(self._path(rel))

    def glob(self, pattern: str) -> list[str]:
        """Only the last component may hold wildcards (/dev/sd*, /dev/nvme*n1)."""
        head, _, tail = pattern.strip("/").rpartition("/")
        if any(c in head for c in "*?["):
            return []
        names = self.listdir(head) if any(c in tail for c in "*?[") else [tail]
        return [f"{head}/{n}" if head else n for n in names if fnmatch.fnmatchcase(n, tail)]

    def block_device(self, rel: str) -> tuple[int, int] | None:
        try:
            st = os.stat(self._path(rel))
        except OSError:
            return None
        if not stat.S_ISBLK(st.st_mode):
            return None
        return os.major(st.st_rdev), os.minor(st.st_rdev)


class DryRun:
    """-dry-run: reads the host, writes nothing; says what it would have written."""

    def __init__(self, files: HostFiles):
        self._files = files

    def show(self, rel: str) -> str:
        return self._files.show(rel)

    def read(self, rel: str) -> str | None:
        return self._files.read(rel)

    def write(self, rel: str, text: str) -> None:
        log.info("dry-run: would write %r to %s", text.strip(), self.show(rel))

    def exists(self, rel: str) -> bool:
        return self._files.exists(rel)

    def listdir(self, rel: str) -> list[str]:
        return self._files.listdir(rel)

    def mkdir(self, rel: str) -> None:
        log.info("dry-run: would create %s", self.show(rel))

    def rmdir(self, rel: str) -> None:
        log.info("dry-run: would remove %s", self.show(rel))

    def glob(self, pattern: str) -> list[str]:
        return self._files.glob(pattern)

    def block_device(self, rel: str) -> tuple[int, int] | None:
        return self._files.block_device(rel)
