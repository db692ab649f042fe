"""The HPACK header-block reader and literal writer, checked against the `hpack`
package as an independent encoder/decoder (RFC 7541)."""

from __future__ import annotations

import random

import hpack
import pytest
from hpack.hpack import encode_integer
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from cri_resmgr.transport.framerelay.headerblock import BlockError, Reader, encode_literals

PATH = frozenset({b":path"})

_huffman = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


def decoded(decoder: hpack.Decoder, block: bytes) -> list[tuple[bytes, bytes]]:
    return [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)]


def request(path: str, extra: list = ()) -> list:
    """A gRPC request's headers as a client sends them (pseudo-headers first)."""
    return [
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
        ("content-type", "application/grpc"), ("user-agent", "grpc-go/1.59.0"), ("te", "trailers"),
        *extra,
    ]


def raw_literal(name: bytes, value: bytes) -> bytes:
    """A literal with incremental indexing and a new name, no Huffman (names/values < 127)."""
    return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value


def size_update(size: int) -> bytes:
    prefix = encode_integer(size, 5)
    prefix[0] |= 0x20
    return bytes(prefix)


# -- RFC 7541 Appendix C: byte-exact examples --------------------------------------------

RFC_C3 = [  # requests without Huffman coding, one connection
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
]
RFC_C4 = [  # the same requests with Huffman coding
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
]
RFC_FIELDS = [
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")],
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com"),
     (b"cache-control", b"no-cache")],
    [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"),
     (b":authority", b"www.example.com"), (b"custom-key", b"custom-value")],
]


@pytest.mark.parametrize("blocks", [RFC_C3, RFC_C4], ids=["raw", "huffman"])
def test_rfc_examples_decode_and_leave_the_rfc_dynamic_table(blocks) -> None:
    reader = Reader()
    for hexblock, expected in zip(blocks, RFC_FIELDS, strict=True):
        assert reader.fields(bytes.fromhex(hexblock)) == expected
    # RFC 7541 C.3.3: the table is now [custom-key, cache-control, :authority], newest first.
    assert reader.fields(b"\xbe\xbf\xc0") == [
        (b"custom-key", b"custom-value"), (b"cache-control", b"no-cache"), (b":authority", b"www.example.com")]
    with pytest.raises(BlockError, match="65"):
        reader.fields(b"\xc1")


def test_rfc_integer_example_1337_in_a_5_bit_prefix() -> None:
    reader = Reader()
    reader.read(bytes.fromhex("3f9a0a"))  # RFC 7541 C.1.2, as a table size update
    assert reader.max_size == 1337


# -- following a stateful encoder -------------------------------------------------------

def _scripted_blocks(encoder: hpack.Encoder, huffman: bool) -> list[tuple[bytes, int]]:
    """Blocks from one encoder exercising indexing, eviction and size updates,
    each with the table size in force after it."""
    out = []

    def emit(headers, size=None):
        if size is not None:
            encoder.header_table_size = size
        out.append((encoder.encode(headers, huffman=huffman), encoder.header_table_size))

    emit(request("/runtime.v1.RuntimeService/Version"))
    emit(request("/runtime.v1.RuntimeService/Version"))  # all dynamic/static references
    emit(request("/runtime.v1.RuntimeService/ListPodSandbox", [("x-trace", "a" * 40)]))
    emit(request("/runtime.v1.RuntimeService/ListPodSandbox",
                 [hpack.NeverIndexedHeaderTuple("authorization", "Bearer secret"),
                  hpack.NeverIndexedHeaderTuple("x-trace", "never indexed")]))
    emit([(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "0")])
    emit(request("/runtime.v1.RuntimeService/Version"), size=256)  # evicts down to 256
    for i in range(12):  # each insert now evicts older entries
        emit(request(f"/runtime.v1.RuntimeService/Call{i % 5}", [("x-n", str(i) * (i + 1))]))
    emit(request("/runtime.v1.RuntimeService/Call1", [("x-big", "z" * 300)]))  # larger than the table
    emit(request("/runtime.v1.RuntimeService/Call1"))
    emit(request("/runtime.v1.RuntimeService/Version"), size=0)
    emit(request("/runtime.v1.RuntimeService/Version", [("x-after-zero", "1")]))
    emit(request("/runtime.v1.RuntimeService/Version"), size=4096)
    emit(request("/runtime.v1.RuntimeService/Version"))
    return out


@pytest.mark.parametrize("huffman", [False, True], ids=["raw", "huffman"])
def test_reader_follows_one_encoder_block_by_block(huffman) -> None:
    encoder, decoder, reader = hpack.Encoder(), hpack.Decoder(), Reader()
    blocks = _scripted_blocks(encoder, huffman)
    # The script must really exercise dynamic references: the repeat costs a few bytes.
    assert len(blocks[1][0]) < len(blocks[0][0]) // 3
    for i, (block, size) in enumerate(blocks):
        assert reader.fields(block) == decoded(decoder, block), f"block {i}"
        assert reader.max_size == size, f"block {i}"
        assert reader.table_empty == (size == 0), f"block {i}"


@pytest.mark.parametrize("huffman", [False, True], ids=["raw", "huffman"])
def test_reading_only_the_path_keeps_the_table_in_step(huffman) -> None:
    encoder, decoder, reader = hpack.Encoder(), hpack.Decoder(), Reader()
    for i, (block, _) in enumerate(_scripted_blocks(encoder, huffman)):
        expected = decoded(decoder, block)
        paths = {n: v for n, v in expected if n == b":path"}
        assert reader.read(block, PATH) == paths, f"block {i}"
    # After all those partial reads, fully indexed blocks still decode right.
    block = encoder.encode(request("/runtime.v1.RuntimeService/Version"), huffman=huffman)
    assert reader.fields(block) == decoded(decoder, block)


@pytest.mark.parametrize("huffman", [False, True], ids=["raw", "huffman"])
def test_unwanted_indexed_values_are_still_kept_for_later_references(huffman) -> None:
    encoder, reader = hpack.Encoder(), Reader()
    first = encoder.encode(request("/p", [("x-custom", "value-for-later")]), huffman=huffman)
    assert reader.read(first, PATH) == {b":path": b"/p"}
    second = encoder.encode(request("/p", [("x-custom", "value-for-later")]), huffman=huffman)
    assert reader.read(second, frozenset({b"x-custom", b":path"})) == {
        b":path": b"/p", b"x-custom": b"value-for-later"}
    assert reader.read(second, frozenset({b"absent"})) == {}


def test_random_header_sequences_match_hpack() -> None:
    rng = random.Random(7541)
    names = ["x-a", "x-bb", "grpc-timeout", ":path", "content-type", "user-agent", "x-long-name-" + "n" * 60]
    values = ["", "1", "v" * 10, "w" * 100, "u" * 200, "application/grpc", "/runtime.v1.RuntimeService/Version"]
    encoder, decoder, reader, partial = hpack.Encoder(), hpack.Decoder(), Reader(), Reader()
    for i in range(300):
        if rng.random() < 0.08:
            encoder.header_table_size = rng.choice([0, 64, 200, 512, 4096])
        headers = []
        for _ in range(rng.randint(0, 8)):
            name, value = rng.choice(names), rng.choice(values)
            headers.append(hpack.NeverIndexedHeaderTuple(name, value) if rng.random() < 0.1 else (name, value))
        block = encoder.encode(headers, huffman=rng.random() < 0.5)
        expected = decoded(decoder, block)
        assert reader.fields(block) == expected, f"block {i}"
        assert partial.read(block, PATH) == {n: v for n, v in expected if n == b":path"}, f"block {i}"
        assert reader.max_size == partial.max_size == encoder.header_table_size


def test_reads_with_no_table_match_hpack_and_the_full_walk() -> None:
    """Once the table has size 0, a wanted field is found by a shorter walk; it must
    read what the full walk reads (a repeated name's last value, long strings, names
    indexed or literal, Huffman or not)."""
    rng = random.Random(9113)
    names = [":path", "x-a", "grpc-timeout", "content-type", "user-agent", "x-" + "n" * 130]
    values = ["", "1", "/runtime.v1.RuntimeService/Version", "v" * 126, "w" * 127, "u" * 300]
    wanted = frozenset({b":path", b"grpc-timeout"})
    encoder, decoder, reader, walker = hpack.Encoder(), hpack.Decoder(), Reader(), Reader()
    encoder.header_table_size = 0
    for i in range(400):
        headers = []
        for _ in range(rng.randint(0, 9)):
            name, value = rng.choice(names), rng.choice(values)
            headers.append(hpack.NeverIndexedHeaderTuple(name, value) if rng.random() < 0.1 else (name, value))
        block = encoder.encode(headers, huffman=rng.random() < 0.5)
        expected = decoded(decoder, block)
        walked = dict(walker._walk(block, wanted))
        assert walker.max_size == 0
        assert reader.read(block, wanted) == walked == {n: v for n, v in expected if n in wanted}, f"block {i}"
        assert reader.read(block, PATH) == {n: v for n, v in expected if n == b":path"}, f"block {i}"
    with pytest.raises(BlockError):
        reader.read(b"\x00\x05:pa", PATH)  # truncated
    with pytest.raises(BlockError):
        reader.read(b"\xbe", PATH)  # the dynamic table is empty


# -- integers past their prefix ---------------------------------------------------------

@pytest.mark.parametrize("length", [0, 1, 126, 127, 128, 300, 16389])
@pytest.mark.parametrize("huffman", [False, True], ids=["raw", "huffman"])
def test_string_lengths_around_and_past_the_7_bit_prefix(length, huffman) -> None:
    encoder, decoder, reader = hpack.Encoder(), hpack.Decoder(max_header_list_size=1 << 20), Reader()
    headers = [("x-long", "q" * length), ("x-" + "k" * length, "v")]
    for _ in range(2):  # the second time the first field comes from the dynamic table (if it fits)
        block = encoder.encode(headers, huffman=huffman)
        assert reader.fields(block) == decoded(decoder, block)


def test_indexes_past_62_in_every_representation() -> None:
    encoder, decoder, reader = hpack.Encoder(), hpack.Decoder(), Reader()
    first = encoder.encode([(f"x-h{i}", "v") for i in range(70)], huffman=False)
    assert reader.fields(first) == decoded(decoder, first)
    # x-h0 is now dynamic index 62 + 69 = 131: past the 7-, 6- and 4-bit prefixes.
    cases = {
        "indexed": ([("x-h0", "v")], 0x80 | 0x7F),
        "indexed name, incremental indexing": ([("x-h0", "other")], 0x40 | 0x3F),
        "indexed name, never indexed": ([hpack.NeverIndexedHeaderTuple("x-h1", "secret")], 0x10 | 0x0F),
    }
    for label, (headers, first_byte) in cases.items():
        block = encoder.encode(headers, huffman=False)
        assert block[0] == first_byte, label  # the index really needs continuation bytes
        assert reader.fields(block) == decoded(decoder, block), label


def test_an_index_encoded_with_continuation_bytes() -> None:
    reader = Reader()
    reader.fields(b"".join(raw_literal(f"n{i}".encode(), b"v") for i in range(70)))
    # Index 130 = 127 + 3: the second-oldest entry, n1.
    assert reader.fields(b"\xff\x03") == [(b"n1", b"v")]
    # The boundary between the tables: 62 is the newest dynamic entry, 61 the last static one.
    assert reader.fields(b"\xbe\xbd") == [(b"n69", b"v"), (b"www-authenticate", b"")]
    with pytest.raises(BlockError, match="index 0 "):
        reader.fields(b"\x80")  # 0 is never an index, however full the table


# -- eviction, checked where it shows: references to evicted entries ---------------------

def test_inserting_past_the_size_evicts_the_oldest_entry() -> None:
    # Entries are 32 + 2 = 34 bytes; a 100-byte table holds two.
    block = size_update(100) + raw_literal(b"a", b"1") + raw_literal(b"b", b"2") + raw_literal(b"c", b"3")
    reader, decoder = Reader(), hpack.Decoder()
    assert reader.fields(block) == decoded(decoder, block)
    assert reader.fields(b"\xbe\xbf") == decoded(decoder, b"\xbe\xbf") == [(b"c", b"3"), (b"b", b"2")]
    with pytest.raises(hpack.HPACKDecodingError):
        decoder.decode(b"\xc0")
    with pytest.raises(BlockError, match="64"):
        reader.fields(b"\xc0")


def test_shrinking_the_table_evicts_down_to_the_new_size() -> None:
    reader = Reader()
    reader.fields(raw_literal(b"a", b"1") + raw_literal(b"b", b"2") + raw_literal(b"c", b"3"))
    assert reader.fields(b"\xc0") == [(b"a", b"1")]
    reader.fields(size_update(70))  # room for two 34-byte entries
    assert reader.fields(b"\xbe\xbf") == [(b"c", b"3"), (b"b", b"2")]
    with pytest.raises(BlockError):
        reader.fields(b"\xc0")
    reader.fields(size_update(0))
    assert reader.table_empty
    with pytest.raises(BlockError):
        reader.fields(b"\xbe")


def test_an_entry_larger_than_the_table_empties_it() -> None:
    block = size_update(100) + raw_literal(b"a", b"1") + raw_literal(b"big", b"x" * 70)
    reader, decoder = Reader(), hpack.Decoder()
    assert reader.fields(block) == decoded(decoder, block)
    with pytest.raises(hpack.HPACKDecodingError):
        decoder.decode(b"\xbe")
    with pytest.raises(BlockError):
        reader.fields(b"\xbe")


def test_growing_the_table_again_after_zero() -> None:
    reader = Reader()
    reader.fields(size_update(0) + raw_literal(b"gone", b"1"))
    assert reader.table_empty
    reader.fields(size_update(4096) + raw_literal(b"kept", b"2"))
    assert not reader.table_empty
    assert reader.fields(b"\xbe") == [(b"kept", b"2")]
    with pytest.raises(BlockError):
        reader.fields(b"\xbf")


# -- bad blocks -------------------------------------------------------------------------

BAD_BLOCKS = {
    "index 0": b"\x80",
    "index 62, empty table": b"\xbe",
    "index 127, empty table": b"\xff\x00",
    "huge index": b"\xff\xff\xff\xff\x7f",
    "integer with too many continuation bytes": b"\xff\x80\x80\x80\x80\x80\x01",
    "integer cut off": b"\xff\x80",
    "prefix full, nothing after": b"\xff",
    "size update cut off": b"\x3f",
    "literal name index 0 without name": b"\x40",
    "literal name length past the end": b"\x40\x05ab",
    "literal value missing": b"\x41",
    "literal value past the end": b"\x41\x0fwww",
    "literal name index past the table": b"\x7e\x01v",
    "never-indexed name index past the table": b"\x1f\x30\x01v",
    "bad Huffman name (EOS)": b"\x00\x84\xff\xff\xff\xff\x01v",
    "bad Huffman value (EOS)": b"\x04\x84\xff\xff\xff\xff",
    "Huffman value with a padding of zeros": b"\x04\x81\x00",
    "Huffman value with 8 bits of padding": b"\x04\x82\x07\xff",
    "bad Huffman value, indexing": b"\x44\x84\xff\xff\xff\xff",
}


@pytest.mark.parametrize("block", BAD_BLOCKS.values(), ids=BAD_BLOCKS.keys())
def test_bad_blocks_raise_block_error(block) -> None:
    with pytest.raises(hpack.HPACKError):  # the reference agrees the block is bad
        hpack.Decoder().decode(block)
    with pytest.raises(BlockError):
        Reader().fields(block)
    if block == BAD_BLOCKS["bad Huffman name (EOS)"]:
        # A name the relay does not want is matched in its coded form, never
        # decoded; the runtime's decoder refuses the block the relay passes on.
        assert Reader().read(block, PATH) == {}
        return
    with pytest.raises(BlockError):
        Reader().read(block, PATH)


def test_block_error_is_a_value_error() -> None:
    assert issubclass(BlockError, ValueError)


@pytest.mark.parametrize("huffman", [False, True], ids=["raw", "huffman"])
def test_every_truncation_of_a_block_decodes_or_raises_block_error(huffman) -> None:
    block = hpack.Encoder().encode(
        request("/runtime.v1.RuntimeService/Version", [("x-long", "l" * 200), ("x-n", "1")]), huffman=huffman)
    for cut in range(len(block)):
        try:
            expected = decoded(hpack.Decoder(), block[:cut])
        except hpack.HPACKError:
            with pytest.raises(BlockError):
                Reader().fields(block[:cut])
        else:
            assert Reader().fields(block[:cut]) == expected, cut


def test_random_bytes_raise_nothing_but_block_error() -> None:
    rng = random.Random(9113)
    for _ in range(3000):
        block = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 24)))
        for want in (None, PATH):
            try:
                Reader().fields(block) if want is None else Reader().read(block, want)
            except BlockError:
                pass


def test_many_distinct_huffman_strings_past_the_cache_limit() -> None:
    reader = Reader()
    for i in range(5000):
        value = f"/svc/Method{i}".encode()
        coded = _huffman.encode(value)
        block = b"\x04" + bytes([0x80 | len(coded)]) + coded  # :path, literal without indexing
        assert reader.read(block, PATH) == {b":path": value}


# -- writing literals -------------------------------------------------------------------

LITERAL_FIELDS = [
    (b":status", b"200"),
    (b"content-type", b"application/grpc"),
    (b"grpc-status", b"14"),
    (b"grpc-message", b"runtime %2F unreachable: " + b"m" * 300),
    (b"x-" + b"n" * 130, b""),
    (b"x-empty", b""),
]


def test_encode_literals_round_trips_through_hpack_and_leaves_its_table_empty() -> None:
    block = encode_literals(LITERAL_FIELDS)
    decoder = hpack.Decoder()
    assert decoded(decoder, block) == LITERAL_FIELDS
    with pytest.raises(hpack.HPACKDecodingError):
        decoder.decode(b"\xbe")  # nothing was added to the dynamic table
    assert Reader().fields(block) == LITERAL_FIELDS


def test_encode_literals_between_stateful_blocks_does_not_disturb_the_peer() -> None:
    encoder, decoder, reader = hpack.Encoder(), hpack.Decoder(), Reader()
    for i in range(3):
        block = encoder.encode(request("/p", [("x-i", str(i))]))
        assert decoded(decoder, block) == reader.fields(block)
        own = encode_literals(LITERAL_FIELDS[:3])
        assert decoded(decoder, own) == reader.fields(own) == LITERAL_FIELDS[:3]
    block = encoder.encode(request("/p", [("x-i", "2")]))  # all references into the table
    assert decoded(decoder, block) == reader.fields(block)


@pytest.mark.parametrize("length", [0, 1, 126, 127, 128, 255, 16384])
def test_encode_literals_lengths_around_the_7_bit_prefix(length) -> None:
    fields = [(b"n" * length, b"v"), (b"x-v", b"w" * length)]
    block = encode_literals(fields)
    assert decoded(hpack.Decoder(max_header_list_size=1 << 20), block) == fields
    assert Reader().fields(block) == fields


def test_encode_literals_of_nothing_is_an_empty_block() -> None:
    assert encode_literals([]) == b""


# -- what a hostile encoder can cost (issue: HPACK string cache and decoding) -----------

def _encode_integer_with_flag(value: int) -> bytes:
    out = bytearray(encode_integer(value, 7))
    out[0] |= 0x80
    return bytes(out)


def _huffman_literal(name: bytes, value: bytes, first: int) -> bytes:
    cn, cv = _huffman.encode(name), _huffman.encode(value)
    return (bytes([first]) + _encode_integer_with_flag(len(cn)) + cn
            + _encode_integer_with_flag(len(cv)) + cv)


def test_unwanted_literal_names_are_never_decoded(monkeypatch) -> None:
    import cri_resmgr.transport.framerelay.headerblock as hb
    decodes = []
    real = hb.decode_huffman
    monkeypatch.setattr(hb, "decode_huffman", lambda raw: decodes.append(len(raw)) or real(raw))
    reader = Reader()
    for i in range(50):  # distinct 16 KiB names, as a flood would send
        block = _huffman_literal(f"x-{i}-".encode() + b"n" * 16384, b"v", 0x00)
        assert reader.read(block, PATH) == {}
    assert decodes == []
    path = _huffman_literal(b":path", b"/runtime.v1.RuntimeService/Version", 0x00)
    assert reader.read(path, PATH) == {b":path": b"/runtime.v1.RuntimeService/Version"}
    assert decodes  # the wanted one, matched in its coded form, is decoded


def test_the_string_cache_is_bounded_by_bytes() -> None:
    reader = Reader(cache_bytes=4096)
    for i in range(2000):
        value = f"/svc/M{i}".encode() + b"p" * (i % 200)
        coded = _huffman.encode(value)
        block = b"\x04" + _encode_integer_with_flag(len(coded)) + coded
        assert reader.read(block, PATH) == {b":path": value}
        assert reader._cached <= 4096
    big = b"/" + b"q" * 100_000
    coded = _huffman.encode(big)
    assert reader.read(b"\x04" + _encode_integer_with_flag(len(coded)) + coded, PATH) == {b":path": big}
    assert reader._cached <= 4096  # long strings are not cached at all


def test_an_entry_too_large_for_the_table_is_not_decoded_and_empties_it(monkeypatch) -> None:
    import cri_resmgr.transport.framerelay.headerblock as hb
    encoder, decoder, reader = hpack.Encoder(), hpack.Decoder(), Reader()
    first = encoder.encode([("x-small", "s")])
    assert reader.fields(first) == decoded(decoder, first)
    decodes = []
    real = hb.decode_huffman
    monkeypatch.setattr(hb, "decode_huffman", lambda raw: decodes.append(len(raw)) or real(raw))
    huge = _huffman_literal(b"x-huge", b"h" * 40_000, 0x40)  # incremental indexing, > 4096 decoded
    assert reader.read(huge, PATH) == {}
    assert not [n for n in decodes if n > 1000]
    decoded(decoder, huge)
    after = encoder.encode([("x-after", "a")])  # the reference encoder knows nothing of `huge`
    assert reader.fields(b"\x20" + after) == decoded(decoder, b"\x20" + after)


def test_a_table_size_update_beyond_4096_is_a_block_error() -> None:
    with pytest.raises(BlockError):
        update = bytearray(encode_integer(4097, 5))
        update[0] |= 0x20
        Reader().read(bytes(update), PATH)
