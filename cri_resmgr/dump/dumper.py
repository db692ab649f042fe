"""The dumper the relay calls: cheap capture on the event loop, work on a thread.

The relay asks level(path) for every call (a cached dict lookup) and calls
request()/reply() only when that is not OFF.  Those only put a tuple on a
bounded queue; when the queue is full the message is dropped and counted, and
the writer thread reports the drops in the dump.  Nothing waits on the writer.
close() drains whatever was captured, writes final counts, and closes the file.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, Literal, ParamSpec, Protocol, TextIO

from cri_resmgr.dump.format import FORMATS
from cri_resmgr.dump.output import FILE_MODE, DumpFile
from cri_resmgr.dump.rules import Level, Rules, parse_specs
from cri_resmgr.dump.writer import CNT, NOTE, REP, REQ, Item, Writer
from cri_resmgr.transport.methods import MethodTable


class StatusCode(Protocol):
    """A call's status code as the transport gives it (grpc.StatusCode): only its name is
    dumped, so the dumper needs no gRPC (.importlinter)."""

    @property
    def name(self) -> str: ...


DEFAULT_QUEUE_SIZE = 10000
__all__ = ["Dumper", "FILE_MODE", "DEFAULT_QUEUE_SIZE"]
# Tells the writer thread to finish; its own kind, so that it cannot be mistaken for an Item.
_STOP_KIND: Final = "stop"
_Stop = tuple[Literal["stop"]]
_STOP: _Stop = (_STOP_KIND,)
# Tells the writer thread to reopen the dump file (SIGHUP, after logrotate moved it).
_REOPEN_KIND: Final = "reopen"
_Reopen = tuple[Literal["reopen"]]
_REOPEN: _Reopen = (_REOPEN_KIND,)
P = ParamSpec("P")
_OK_CODE_NAMES = (None, "OK")


class Dumper:
    def __init__(self, specs: Iterable[str], *, file: str | None = None, fmt: str = "human",
                 redact: bool = True, count_period: float = 30.0, methods: MethodTable | None = None,
                 stream: TextIO | None = None, queue_size: int = DEFAULT_QUEUE_SIZE,
                 max_size: int | None = None) -> None:
        self.rules: Rules = parse_specs(specs)
        if fmt not in FORMATS:
            raise ValueError(f"unknown dump format {fmt!r} (known: {', '.join(FORMATS)})")
        if count_period <= 0:
            raise ValueError(f"dump count period must be positive, got {count_period!r}")
        if queue_size < 1:
            raise ValueError(f"dump queue size must be positive, got {queue_size!r}")
        self.count_period = count_period
        self._max = queue_size
        self._queue: queue.SimpleQueue[Item | _Stop | _Reopen] = queue.SimpleQueue()
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._closed = False
        self._owns_out = file is not None
        self._file = DumpFile(file, max_size) if file is not None else None
        out = self._file if self._file is not None else (stream if stream is not None else sys.stderr)
        # A note is a line the relay logs too (dry-run's "would set"): in a dump that goes to
        # stderr beside the log, it would show twice.
        self._notes = out is not sys.stderr
        self._writer = Writer(out, FORMATS[fmt](redact=redact), methods if methods is not None else MethodTable())
        self._thread = threading.Thread(target=self._run, name="cri-dump-writer", daemon=True)
        self._thread.start()

    # -- relay side: must stay cheap ------------------------------------------------

    def level(self, path: str) -> Level:
        """How to dump calls of a gRPC path; decided once per path, then a dict lookup."""
        return self.rules.level(path)

    def wants(self, path: str) -> bool:
        """Whether calls of this path are dumped at all (the relay's question)."""
        return self.rules.level(path) is not Level.OFF

    @property
    def enabled(self) -> bool:
        """False when no rule could ever dump anything; the relay may skip the dumper."""
        return not self.rules.empty

    @property
    def dropped(self) -> int:
        return self._dropped

    def request(self, path: str, call_id: int, data: bytes) -> None:
        """A request message, as raw bytes; call_id pairs it with its replies."""
        level = self.rules.level(path)
        if level is Level.COUNT:
            self._put((CNT, path, 1, 0))
        elif level is not Level.OFF:
            self._put((REQ, path, call_id, data, time.time(), level))

    def reply(self, path: str, call_id: int, data: bytes | None, latency: float,
              code: StatusCode | None = None, details: str = "") -> None:
        """A reply message (data), or the end of a call (data=None) with its status.
        code None means OK; latency is seconds since the request."""
        level = self.rules.level(path)
        code_name = None if code is None else getattr(code, "name", None) or str(code)
        if level is Level.COUNT:
            if code_name not in _OK_CODE_NAMES:
                self._put((CNT, path, 0, 1))
        elif level is not Level.OFF:
            self._put((REP, path, call_id, data, time.time(), level, latency, code_name, details))

    def note(self, text: str) -> None:
        """A free-form line (e.g. a dry-run policy decision), dumped whatever the rules, unless
        the dump shares stderr with the log, which has the line already."""
        if self._notes:
            self._put((NOTE, text, time.time()))

    def _put(self, item: Item) -> None:
        # qsize() is exact enough: only this side adds, so the bound can only be
        # overshot by concurrent producers, never by the consumer.
        if self._closed or self._queue.qsize() >= self._max:
            with self._drop_lock:
                self._dropped += 1
            return
        self._queue.put(item)

    # -- lifecycle -------------------------------------------------------------------

    def reopen(self) -> None:
        """Reopens the dump file on the writer thread, after what is queued (SIGHUP)."""
        if self._file is not None and not self._closed:
            self._queue.put(_REOPEN)  # past the bound on purpose, like stopping

    def close(self) -> None:
        """Drain the queue, write final counts and drops, flush, close our file."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)  # past the bound on purpose: stopping must not be dropped
        self._thread.join()

    def __enter__(self) -> Dumper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        writer = self._writer
        next_counts = time.monotonic() + self.count_period
        try:
            while True:
                timeout = max(0.0, next_counts - time.monotonic())
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    item = None
                if item is not None:
                    if item[0] == _STOP_KIND:
                        break
                    if item[0] == _REOPEN_KIND:
                        if self._file is not None:
                            self._guarded(self._file.reopen)
                    else:
                        self._guarded(writer.handle, item)
                if time.monotonic() >= next_counts:
                    self._guarded(writer.write_counts)
                    next_counts = time.monotonic() + self.count_period
                if self._dropped:
                    self._guarded(writer.report_drops, self._dropped)
                if self._queue.empty():
                    self._guarded(writer.out.flush)
            # _closed is set, so nothing more is enqueued; take what is left.
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item[0] != _STOP_KIND and item[0] != _REOPEN_KIND:
                    self._guarded(writer.handle, item)
            self._guarded(writer.write_counts)
            self._guarded(writer.report_drops, self._dropped)
        finally:
            self._guarded(writer.out.flush)
            if self._owns_out:
                self._guarded(writer.out.close)

    def _guarded(self, fn: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        # One bad message (or a full disk) must not kill the writer and silently
        # stop the dump; say what went wrong where the dump goes, or on stderr.
        try:
            fn(*args, **kwargs)
        except Exception as err:
            msg = f"cri-resmgr dump: {getattr(fn, '__name__', fn)} failed: {type(err).__name__}: {err}\n"
            try:
                self._writer.out.write(msg)
            except Exception:
                sys.stderr.write(msg)

