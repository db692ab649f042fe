"""Tolerant readers of sysfs files for discovery.

A real kernel writes odd things: a trailing NUL (`0\\n\\0`), "(null)" for an
empty nohz_full, -1 for an unknown id, rows of a length nobody expected. A
reader never raises on content: it returns None ("the kernel did not say")
and records a warning naming the path, so that discovery can build a model
without that detail instead of refusing to start.

Files are read with os.open/os.read: discovery reads tens of thousands of
small files on big machines, and pathlib's read_text costs several times more.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Final

from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["Reader", "parse_cpumask"]

log = logging.getLogger("cri_resmgr.topology")

_MISSING: Final = (errno.ENOENT, errno.ENOTDIR)
_STRIP: Final = " \t\r\n\0"


class Reader:
    """Reads sysfs files, collecting one warning per odd file."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, path: str, what: str) -> None:
        message = f"{path}: {what}"
        self.warnings.append(message)
        log.warning("topology: %s", message)

    def text(self, path: str) -> str | None:
        """The file's text without trailing NULs and whitespace; None if absent or unreadable."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as err:
            if err.errno not in _MISSING:
                self.warn(path, f"cannot read: {err.strerror}")
            return None
        try:
            data = os.read(fd, 65536)
        except OSError as err:
            self.warn(path, f"cannot read: {err.strerror}")
            return None
        finally:
            os.close(fd)
        return data.decode("ascii", "replace").strip(_STRIP)

    def cpulist(self, path: str) -> CPUSet | None:
        text = self.text(path)
        if text is None:
            return None
        if text == "(null)":  # nohz_full when not configured
            return CPUSet()
        try:
            return CPUSet.parse(text.replace("\0", ""))
        except ValueError:
            self.warn(path, f"not a CPU list: {text[:80]!r}; ignored")
            return None

    def cpumask(self, path: str) -> CPUSet | None:
        text = self.text(path)
        if text is None:
            return None
        mask = parse_cpumask(text)
        if mask is None:
            self.warn(path, f"not a CPU mask: {text[:80]!r}; ignored")
        return mask

    def integer(self, path: str) -> int | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            self.warn(path, f"expected an integer, got {text[:80]!r}; ignored")
            return None


def parse_cpumask(text: str) -> CPUSet | None:
    """The kernel's hex mask: 32-bit words, most significant first, comma separated."""
    words = text.strip(_STRIP).split(",")
    cpus: list[int] = []
    base = 0
    for word in reversed(words):
        try:
            value = int(word, 16)
        except ValueError:
            return None
        if value < 0 or len(word) > 8:
            return None
        while value:
            low = value & -value
            cpus.append(base + low.bit_length() - 1)
            value ^= low
        base += 32
    return CPUSet(cpus)
