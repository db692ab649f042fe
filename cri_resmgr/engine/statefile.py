"""The state file's text, kept so that a save costs what changed since the last.

The file is one JSON object: a head (format, version, time, policy) and three
tables, `pods`, `containers` and `assignments`, each an object of entries by key.
Each entry's text is kept from save to save and encoded again only when its
record or assignment changed; a save joins the kept texts, and the write hands
them to the kernel as they are (writev), off the event loop. The bytes are those
of one `json.dumps(state, separators=(",", ":"))` of the whole state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress
from operator import is_not
from pathlib import Path
from typing import Any, Protocol

from cri_resmgr.policy.api import Assignment

__all__ = ["Snapshot", "RecordTable", "AssignmentTable", "entry", "write_atomically"]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def entry(key: str, value: Any) -> bytes:
    """One entry of a table, comma first: a table is its entries joined, the first's
    comma left out. (json.dumps escapes all but ASCII: the text is its bytes.)"""
    return f",{dumps(key)}:{dumps(value)}".encode()


@dataclass(frozen=True)
class Snapshot:
    """The state file's parts: the head and each table's entries (see `entry`)."""

    head: dict[str, Any]
    pods: list[bytes]
    containers: list[bytes]
    assignments: list[bytes]
    generation: int = 0  # the order its cache took it in: an older one is never written over a newer

    def parts(self) -> list[bytes]:
        """The file in pieces, in order, without joining the entries into one buffer."""
        out = [dumps(self.head)[:-1].encode()]  # without its closing brace: the tables follow
        for name, entries in ((b"pods", self.pods), (b"containers", self.containers),
                              (b"assignments", self.assignments)):
            out.append(b',"' + name + b'":{')
            if entries:
                out.append(entries[0][1:])
                out += entries[1:]
            out.append(b"}")
        out.append(b"}")
        return out

    def encode(self) -> bytes:
        return b"".join(self.parts())


class Record(Protocol):
    def encoded(self) -> bytes:
        """The record's entry; b"" when it is not saved (a container without an id)."""


class RecordTable:
    """The entries of the cache's pods or containers, in the cache's order. A record
    reports its own changes (`touch`, from its __setattr__): a save encodes those
    only, and when nothing changed hands out the very list of the last one."""

    def __init__(self) -> None:
        self._texts: dict[str, bytes] = {}  # b"": not saved (yet)
        self._dirty: dict[str, Record] = {}
        self._entries: list[bytes] | None = []

    def put(self, key: str, record: Record) -> None:
        """Adds or replaces (in its place, as a dict does) the record under `key`."""
        self._texts[key] = b""
        self._dirty[key] = record
        self._entries = None

    def touch(self, key: str, record: Record) -> None:
        if key in self._texts:
            self._dirty[key] = record

    def drop(self, key: str) -> None:
        if self._texts.pop(key, None) is not None:
            self._entries = None
        self._dirty.pop(key, None)

    def clear(self) -> None:
        self._texts.clear()
        self._dirty.clear()
        self._entries = []

    def settle(self, most: int | None = None) -> None:
        """Encodes the records changed since the last call; none if more than `most`."""
        if self._dirty and (most is None or len(self._dirty) <= most):
            texts = self._texts
            for key, record in self._dirty.items():
                text = record.encoded()
                if texts[key] != text:
                    texts[key] = text
                    self._entries = None
            self._dirty.clear()

    def entries(self) -> list[bytes]:
        """The saved records' entries; the list is never changed afterwards (a writer
        thread may hold it)."""
        self.settle()
        if self._entries is None:
            self._entries = list(filter(None, self._texts.values()))
        return self._entries


class AssignmentTable:
    """The policy's assignments' entries. A policy that hands out the same object for
    an unchanged assignment (the pool policies do) costs a save a pass in C over the
    objects (identity tests); an equal one built anew (without details, whose keys'
    order may differ, and so their text) keeps its text too; the rest are encoded."""

    def __init__(self) -> None:
        self._objects: dict[str, Assignment] = {}  # what each text encodes
        self._texts: dict[str, bytes] = {}

    def note(self, key: str, a: Assignment) -> None:
        """Encodes one assignment ahead of the next `entries`."""
        if self._objects.get(key) is not a:
            self._set(key, a)

    def entries(self, assignments: Mapping[str, Assignment]) -> list[bytes]:
        objects, texts = self._objects, self._texts
        keys = list(assignments)
        # The keys whose object is not the one last encoded: map, compress and is_not
        # run in C, so a thousand unchanged assignments cost some 80 us, not 260.
        for key in list(compress(keys, map(is_not, assignments.values(), map(objects.get, keys)))):
            self._set(key, assignments[key])
        for key in objects.keys() - assignments.keys():  # released
            del objects[key], texts[key]
        return list(map(texts.__getitem__, keys))

    def _set(self, key: str, a: Assignment) -> None:
        was = self._objects.get(key)
        if was is None or a.details or was != a:
            self._texts[key] = entry(key, a.to_json())
        self._objects[key] = a


_IOV_MAX = 1024  # writev's limit on Linux (sysconf IOV_MAX)


def write_atomically(path: Path, parts: list[bytes]) -> None:
    """Write, fsync, rename: a crash leaves the old file or the new one. The pieces
    go to the kernel as they are, with the GIL released: a writer thread does not
    hold up the event loop joining a megabyte of text."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for i in range(0, len(parts), _IOV_MAX):
            batch = parts[i:i + _IOV_MAX]
            done = os.writev(fd, batch)
            if done < sum(map(len, batch)):  # short (a full disk says so with an error)
                rest = memoryview(b"".join(batch))[done:]
                while rest:
                    rest = rest[os.write(fd, rest):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
