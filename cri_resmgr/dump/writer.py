"""The writer side of the dumper: raw captures in, formatted text out.

Runs on the dumper's thread (never on the relay's event loop): decodes the raw
bytes with the CRI method table, works out qualifiers, learns pod/container
names, keeps the per-method counts, and writes through a formatter.  It is
plain synchronous code so tests can drive it without a thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Literal, Protocol

from google.protobuf.message import Message

from cri_resmgr.dump.format import REPLY, REQUEST, CallRecord, CountRecord, DropRecord, Formatter, NoteRecord, Record
from cri_resmgr.dump.names import (
    LEARNING_METHODS,
    REQUEST_KEEPING_METHODS,
    NameBook,
    learn_from_call,
    request_qualifier,
)
from cri_resmgr.dump.rules import Level
from cri_resmgr.transport.methods import Method, MethodTable, split_path

# Queue item kinds.  Items are plain tuples because the relay's event loop builds
# them and must stay cheap; the kind in front tells them apart.
REQ: Final = "req"
REP: Final = "rep"
CNT: Final = "cnt"
NOTE: Final = "note"
#   (REQ, path, call_id, data, wall_time, level)
RequestItem = tuple[Literal["req"], str, int, bytes, float, Level]
#   (REP, path, call_id, data | None, wall_time, level, latency, code_name, details)
ReplyItem = tuple[Literal["rep"], str, int, bytes | None, float, Level, float, str | None, str]
#   (CNT, path, calls, failed)
CountItem = tuple[Literal["cnt"], str, int, int]
#   (NOTE, text, wall_time)
NoteItem = tuple[Literal["note"], str, float]
Item = RequestItem | ReplyItem | CountItem | NoteItem

class Output(Protocol):
    """Where the formatted text goes: a text file, stderr, or a `output.DumpFile`."""

    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


MAX_PENDING = 65536  # open calls remembered for their qualifier (guards against lost replies)


class Writer:
    def __init__(self, out: Output, formatter: Formatter, methods: MethodTable,
                 clock: Callable[[], float] = time.time) -> None:
        self.out = out
        self.formatter = formatter
        self.methods = methods
        self.names = NameBook()
        self._clock = clock
        # call_id -> (qualifier, decoded request kept for learning, or None)
        self._pending: dict[int, tuple[str, Message | None]] = {}
        self._counts: dict[str, list[int]] = {}  # path -> [calls, failed]
        self._counts_since = clock()
        self._drops_reported = 0

    def emit(self, record: Record) -> None:
        self.out.write(self.formatter(record))

    def handle(self, item: Item) -> None:
        if item[0] == REQ:
            self._request(*item[1:])
        elif item[0] == REP:
            self._reply(*item[1:])
        elif item[0] == CNT:
            counts = self._counts.setdefault(item[1], [0, 0])
            counts[0] += item[2]
            counts[1] += item[3]
        elif item[0] == NOTE:
            self.emit(NoteRecord(time=item[2], text=item[1]))
        else:
            raise ValueError(f"unknown dump queue item {item[0]!r}")

    def write_counts(self) -> None:
        """Emit and reset the per-method counts, if any call was counted."""
        now = self._clock()
        if self._counts:
            counts = {path: (c[0], c[1]) for path, c in self._counts.items() if c[0] or c[1]}
            if counts:
                self.emit(CountRecord(time=now, period=now - self._counts_since, counts=counts))
        self._counts = {}
        self._counts_since = now

    def report_drops(self, total: int) -> None:
        if total > self._drops_reported:
            self.emit(DropRecord(time=self._clock(), dropped=total - self._drops_reported, total=total))
            self._drops_reported = total

    # -- calls -----------------------------------------------------------------

    def _request(self, path: str, call_id: int, data: bytes, wall: float, level: Level) -> None:
        method = self.methods.lookup(path)
        record = self._record(REQUEST, path, method, call_id, wall, level)
        record.raw_size = len(data)
        keep = None
        if method is not None:
            record.message, record.decode_error = _decode(method.request, data)
            if record.message is not None:
                record.qualifier = request_qualifier(method.name, record.message, self.names)
            if method.name in REQUEST_KEEPING_METHODS:
                keep = record.message
        if len(self._pending) >= MAX_PENDING:
            del self._pending[next(iter(self._pending))]
        self._pending[call_id] = (record.qualifier, keep)
        self.emit(record)

    def _reply(self, path: str, call_id: int, data: bytes | None, wall: float, level: Level,
               latency: float, code: str | None, details: str) -> None:
        method = self.methods.lookup(path)
        final = data is None or method is None or not method.server_streaming
        qualifier, request = (self._pending.pop(call_id, ("", None)) if final
                              else self._pending.get(call_id, ("", None)))
        record = self._record(REPLY, path, method, call_id, wall, level)
        record.qualifier, record.latency, record.code, record.details = qualifier, latency, code or "OK", details
        if data is not None:
            record.raw_size = len(data)
            wanted = level is Level.FULL or (method is not None and method.name in LEARNING_METHODS)
            if method is not None and wanted:
                record.message, record.decode_error = _decode(method.response, data)
                if record.message is not None and not record.failed and method.name in LEARNING_METHODS:
                    learn_from_call(method.name, request, record.message, self.names)
        self.emit(record)

    @staticmethod
    def _record(direction: str, path: str, method: Method | None, call_id: int, wall: float,
                level: Level) -> CallRecord:
        if method is not None:
            service, name = method.service, method.name
        else:
            service, name = split_path(path)
        return CallRecord(time=wall, direction=direction, path=path, service=service, method=name,
                          call_id=call_id, level=level)


def _decode(cls: type[Message], data: bytes) -> tuple[Message | None, str]:
    try:
        return cls.FromString(data), ""
    except Exception as err:  # a dump must never fail on what it relays
        return None, f"{type(err).__name__}: {err}"
