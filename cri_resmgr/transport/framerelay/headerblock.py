"""The part of HPACK (RFC 7541) a frame-level relay needs.

The relay forwards header blocks verbatim, so it never re-encodes what the
two ends send each other. It reads a block for the few fields it acts on
(`:path`, `grpc-status`), and must keep the dynamic table of each direction
in step with the real decoder at the other end. Strings are decoded only when
a caller wants the field or the table needs its length, and Huffman decodes
are cached by their raw bytes, so a steady stream of calls costs a walk over
the block and a few dict lookups.

The relay's own header blocks (errors it answers itself) use only literals
without indexing, so they never change the peer's dynamic table.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

STATIC = HeaderTable.STATIC_TABLE  # 1-based in the RFC: STATIC[i - 1]
_STATIC_LEN = len(STATIC)
_ENTRY_OVERHEAD = 32
_CACHE_LIMIT = 4096


class BlockError(ValueError):
    """A header block that does not decode; the connection cannot continue."""


def _integer(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    mask = (1 << prefix_bits) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise BlockError("truncated integer")
        b = data[pos]
        pos += 1
        value += (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise BlockError("integer too large")


class Reader:
    """Follows one direction's header blocks and dynamic table."""

    def __init__(self, max_size: int = 4096):
        self.max_size = max_size  # as last set by the encoder (4096 until it says otherwise)
        self._table: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0
        self._strings: dict[bytes, bytes] = {}

    @property
    def table_empty(self) -> bool:
        """True while no entry can be referenced: blocks may then be held back or
        dropped without the peer's decoder losing step."""
        return self.max_size == 0

    def read(self, block: bytes, wanted: frozenset[bytes] = frozenset()) -> dict[bytes, bytes]:
        """Walks a whole block (updating the table) and returns the wanted fields."""
        return dict(self._walk(block, wanted))

    def fields(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """Every field of a block, in order."""
        return self._walk(block, None)

    def _walk(self, block: bytes, want: frozenset[bytes] | None) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        pos, end = 0, len(block)
        try:
            while pos < end:
                b = block[pos]
                if b & 0x80:  # indexed field
                    index, pos = _integer(block, pos, 7)
                    name, value = self._entry(index)
                    if want is None or name in want:
                        out.append((name, value))
                    continue
                if b & 0xE0 == 0x20:  # dynamic table size update
                    size, pos = _integer(block, pos, 5)
                    self.max_size = size
                    self._evict(0)
                    continue
                indexing = b & 0xC0 == 0x40
                index, pos = _integer(block, pos, 6 if indexing else 4)
                if index:
                    name = self._entry(index)[0]
                else:
                    name, pos = self._string(block, pos, True)
                wanted = want is None or name in want
                value, pos = self._string(block, pos, wanted or (indexing and self.max_size > 0))
                if wanted:
                    out.append((name, value))
                if indexing:
                    self._insert(name, value)
        except IndexError:
            raise BlockError("truncated header block") from None
        return out

    # -- internals ---------------------------------------------------------------------

    def _string(self, block: bytes, pos: int, decode: bool) -> tuple[bytes, int]:
        huffman = block[pos] & 0x80
        length, pos = _integer(block, pos, 7)
        end = pos + length
        if end > len(block):
            raise BlockError("truncated string")
        if not decode:
            return b"", end
        raw = bytes(block[pos:end])
        if not huffman:
            return raw, end
        text = self._strings.get(raw)
        if text is None:
            try:
                text = decode_huffman(raw)
            except Exception as e:
                raise BlockError(f"bad Huffman string: {e}") from None
            if len(self._strings) >= _CACHE_LIMIT:
                self._strings.clear()
            self._strings[raw] = text
        return text, end

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_LEN:
            return STATIC[index - 1]
        try:
            if index <= 0:
                raise IndexError
            return self._table[index - _STATIC_LEN - 1]
        except IndexError:
            raise BlockError(f"header index {index} is not in the table") from None

    def _insert(self, name: bytes, value: bytes) -> None:
        size = len(name) + len(value) + _ENTRY_OVERHEAD
        if size > self.max_size:
            self._table.clear()
            self._size = 0
            return
        self._evict(size)
        self._table.appendleft((name, value))
        self._size += size

    def _evict(self, room: int) -> None:
        while self._table and self._size + room > self.max_size:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + _ENTRY_OVERHEAD


# -- writing: literals only ------------------------------------------------------------

def _encode_integer(value: int, prefix_bits: int, first: int) -> bytes:
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes([first | value])
    out = bytearray([first | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literals(fields: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A header block of literals without indexing and without Huffman coding:
    valid for any decoder state, and leaves the peer's table as it was."""
    out = bytearray()
    for name, value in fields:
        out += b"\x00"
        out += _encode_integer(len(name), 7, 0)
        out += name
        out += _encode_integer(len(value), 7, 0)
        out += value
    return bytes(out)
