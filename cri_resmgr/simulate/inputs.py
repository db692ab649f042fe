"""Reading the simulator's input files at a bounded cost.

A -pods, -topology or -dump file is whatever the user points at: a file of
gigabytes, a binary, another encoding. What is read here is refused, with one line
naming the kind of file, the file and where, before it costs more than
MAX_FILE_BYTES (or, for a dump, MAX_LINE_BYTES a line) of memory.
"""

from __future__ import annotations

from collections.abc import Iterator

from cri_resmgr.simulate.calls import WorkloadError

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_BYTES", "read_text", "read_lines"]

MAX_FILE_BYTES = 64 << 20  # a pod list or a topology: real ones are kilobytes
MAX_LINE_BYTES = 64 << 20  # a dump line: one CRI message (16 MiB at most on the wire) as JSON


def read_text(path: str, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The file's text; WorkloadError naming `what` ("pods file") and `path` if it
    cannot be read, is larger than `limit` bytes, or is not UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise WorkloadError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise WorkloadError(f"{what} {path}: larger than {limit >> 20} MiB")
    return _decode(data, f"{what} {path}")


def read_lines(path: str, what: str, limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The file's lines, each decoded; WorkloadError naming `what`, `path` and the line
    for a line longer than `limit` bytes or not UTF-8, or a file that cannot be read."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise WorkloadError(f"cannot read {what} {path}: {e.strerror or e}") from None
    with f:
        n = 0
        while True:
            try:
                line = f.readline(limit + 1)
            except OSError as e:
                raise WorkloadError(f"cannot read {what} {path}: {e.strerror or e}") from None
            if not line:
                return
            n += 1
            if len(line) > limit:
                raise WorkloadError(f"{what} {path}:{n}: a line longer than {limit >> 20} MiB")
            yield _decode(line, f"{what} {path}:{n}")


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WorkloadError(f"{where}: not UTF-8 text (byte {e.start}: {e.reason})") from None
