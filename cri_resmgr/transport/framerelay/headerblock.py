"""The part of HPACK (RFC 7541) a frame-level relay needs.

The relay forwards header blocks verbatim, so it never re-encodes what the
two ends send each other. It reads a block for the few fields it acts on
(`:path`, `grpc-status`), and must keep the dynamic table of each direction
in step with the real decoder at the other end. Strings are decoded only when
a caller wants the field or the table needs the entry: a literal name is
matched against the wanted names in its coded form, and an entry too large for
the table is never decoded (it empties the table whatever it says). Short
Huffman decodes are cached by their raw bytes, up to a byte bound, so a steady
stream of calls costs a walk over the block and a few dict lookups.

The relay's own header blocks (errors it answers itself) use only literals
without indexing, so they never change the peer's dynamic table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

STATIC = HeaderTable.STATIC_TABLE  # 1-based in the RFC: STATIC[i - 1]
_STATIC_LEN = len(STATIC)
_ENTRY_OVERHEAD = 32
_CACHED_STRING = 256  # longer strings are decoded each time: values like :path repeat, junk does not
_HUFFMAN = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


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

    def __init__(self, max_size: int = 4096, cache_bytes: int = 64 << 10):
        self.max_size = max_size  # as last set by the encoder (4096 until it says otherwise)
        self._table: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0
        self._strings: dict[bytes, bytes] = {}
        self._cached = 0  # bytes in _strings, raw and decoded
        self._cache_bytes = cache_bytes
        self._coded: dict[frozenset[bytes], dict[tuple[bool, bytes], bytes]] = {}

    @property
    def table_empty(self) -> bool:
        """True while no entry can be referenced: blocks may then be held back or
        dropped without the peer's decoder losing step."""
        return self.max_size == 0

    def read(self, block: bytes, wanted: frozenset[bytes] = frozenset()) -> dict[bytes, bytes]:
        """Walks a whole block (updating the table) and returns the wanted fields.

        Once the encoder has set its table to size 0 (the relay asks both ends to),
        a block that does not start with a size update cannot change the table:
        with nothing wanted from it, it is not walked. (A wanted field is read from
        the whole block: a name that comes twice means its last value, as in the
        runtime's decoder.)
        """
        if self.max_size == 0 and not (block and block[0] & 0xE0 == 0x20):
            if not wanted:
                return {}
            found = self._find(block, wanted)
            if found is not None:
                return found
        return dict(self._walk(block, wanted))

    def fields(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """Every field of a block, in order."""
        return self._walk(block, None)

    def _walk(self, block: bytes, want: frozenset[bytes] | None) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        pos, end = 0, len(block)
        name: bytes | None  # None: a literal name, not decoded yet
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
                    if size > 4096:  # the relay never lets either end allow more than the default
                        raise BlockError(f"dynamic table size update to {size} beyond the 4096 allowed")
                    self.max_size = size
                    self._evict(0)
                    continue
                indexing = b & 0xC0 == 0x40
                index, pos = _integer(block, pos, 6 if indexing else 4)
                if index:
                    name = self._entry(index)[0]
                    name_at = (0, 0, False)  # the name is in the table, not in the block
                else:
                    name_at = _raw_string(block, pos)
                    pos = name_at[1]
                    name = None
                value_at = _raw_string(block, pos)
                pos = value_at[1]
                store = indexing and self.max_size > 0
                if store and (_least_size(name, name_at) + _least_size(None, value_at) + _ENTRY_OVERHEAD
                              > self.max_size):
                    store = False  # never fits: it empties the table, whatever it says
                    self._clear()
                if name is None:
                    if store or want is None:
                        name = self._decode(block, name_at)
                    else:
                        name = self._coded_names(want).get((name_at[2], block[name_at[0]:name_at[1]]))
                        if name is None:
                            continue  # neither wanted nor stored
                wanted = want is None or name in want
                if wanted or store:
                    value = self._decode(block, value_at)
                    if wanted:
                        out.append((name, value))
                    if store:
                        self._insert(name, value)
        except IndexError:
            raise BlockError("truncated header block") from None
        return out

    # -- internals ---------------------------------------------------------------------

    def _find(self, block: bytes, want: frozenset[bytes]) -> dict[bytes, bytes] | None:
        """`_walk` for a block that cannot change the table (its size is 0): the
        wanted fields, reading integers of one byte inline (a request's block has
        no other); None for anything else (a longer integer, a size update), which
        the full walk then reads. Changes nothing, so the full walk may follow."""
        coded = self._coded_names(want)
        out: dict[bytes, bytes] = {}
        pos, end = 0, len(block)
        name: bytes | None
        try:
            while pos < end:
                b = block[pos]
                if b & 0x80:  # indexed field
                    if b == 0xFF:
                        return None
                    name, value = self._entry(b & 0x7F)
                    if name in want:
                        out[name] = value
                    pos += 1
                    continue
                mask = 0x3F if b & 0xC0 == 0x40 else 0x0F
                index = b & mask
                if index == mask or b & 0xE0 == 0x20:
                    return None
                pos += 1
                if index:
                    name = self._entry(index)[0]
                else:  # a literal name, matched in its coded form
                    h = block[pos]
                    n = h & 0x7F
                    if n == 0x7F:
                        return None
                    pos += 1 + n
                    if pos > end:
                        raise BlockError("truncated string")
                    name = coded.get((h > 0x7F, block[pos - n:pos]))
                h = block[pos]
                n = h & 0x7F
                if n == 0x7F:
                    return None
                start, pos = pos + 1, pos + 1 + n
                if pos > end:
                    raise BlockError("truncated string")
                if name is not None and name in want:
                    out[name] = self._decode(block, (start, pos, h > 0x7F))
        except IndexError:
            raise BlockError("truncated header block") from None
        return out

    def _decode(self, block: bytes, at: tuple[int, int, bool]) -> bytes:
        start, end, huffman = at
        raw = bytes(block[start:end])
        if not huffman:
            return raw
        text = self._strings.get(raw)
        if text is not None:
            return text
        try:
            text = decode_huffman(raw)
        except Exception as e:
            raise BlockError(f"bad Huffman string: {e}") from None
        if len(raw) <= _CACHED_STRING:
            cost = len(raw) + len(text)
            if self._cached + cost > self._cache_bytes:
                self._strings.clear()
                self._cached = 0
            self._strings[raw] = text
            self._cached += cost
        return text

    def _coded_names(self, want: frozenset[bytes]) -> dict[tuple[bool, bytes], bytes]:
        """The wanted names as they may appear on the wire: plain, and Huffman-coded
        (the code is canonical and its padding fixed, so each name has one form)."""
        coded = self._coded.get(want)
        if coded is None:
            coded = self._coded[want] = {}
            for name in want:
                coded[(False, name)] = name
                coded[(True, _HUFFMAN.encode(name))] = name
        return coded

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
            self._clear()
            return
        self._evict(size)
        self._table.appendleft((name, value))
        self._size += size

    def _clear(self) -> None:
        self._table.clear()
        self._size = 0

    def _evict(self, room: int) -> None:
        while self._table and self._size + room > self.max_size:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + _ENTRY_OVERHEAD


def _raw_string(block: bytes, pos: int) -> tuple[int, int, bool]:
    """(start, end, Huffman-coded) of the string literal at `pos`."""
    huffman = bool(block[pos] & 0x80)
    length, pos = _integer(block, pos, 7)
    end = pos + length
    if end > len(block):
        raise BlockError("truncated string")
    return pos, end, huffman


def _least_size(known: bytes | None, at: tuple[int, int, bool]) -> int:
    """A lower bound of a string's decoded length, without decoding it (Huffman
    codes are at most 30 bits long)."""
    if known is not None:
        return len(known)
    start, end, huffman = at
    return (end - start) * 8 // 30 if huffman else end - start


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
