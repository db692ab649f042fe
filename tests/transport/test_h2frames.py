"""HTTP/2 frame and gRPC message helpers (RFC 9113), checked by parsing what they
write and, for header blocks, decoding with the `hpack` package."""

from __future__ import annotations

import struct

import grpc
import hpack
import pytest

from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.headerblock import Reader


def parse_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream id, payload) of each frame; the data must end on a frame."""
    out, pos = [], 0
    while pos < len(data):
        assert len(data) - pos >= 9, "truncated frame header"
        length = int.from_bytes(data[pos:pos + 3], "big")
        ftype, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5:pos + 9], "big")
        payload = data[pos + 9:pos + 9 + length]
        assert len(payload) == length, "truncated frame payload"
        out.append((ftype, flags, sid, payload))
        pos += 9 + length
    return out


def settings(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">HI", k, v) for k, v in pairs)


# -- frame layout -------------------------------------------------------------------------

def test_header_layout() -> None:
    assert h2.header(0x123456, h2.HEADERS, 0x25, 0x7FFFFFFF) == bytes.fromhex("123456" "01" "25" "7fffffff")
    assert h2.header(0, h2.DATA, 0, 0) == bytes(9)


def test_frame_carries_its_payload_length() -> None:
    payload = b"p" * 70000  # past two bytes of length
    assert parse_frames(h2.frame(h2.DATA, h2.END_STREAM, 3, payload)) == [(h2.DATA, h2.END_STREAM, 3, payload)]
    assert parse_frames(h2.frame(h2.PING, h2.ACK, 0)) == [(h2.PING, h2.ACK, 0, b"")]


def test_rst_stream() -> None:
    assert parse_frames(h2.rst_stream(5)) == [(h2.RST_STREAM, 0, 5, b"\x00\x00\x00\x08")]
    assert parse_frames(h2.rst_stream(7, h2.PROTOCOL_ERROR)) == [(h2.RST_STREAM, 0, 7, b"\x00\x00\x00\x01")]


def test_window_update() -> None:
    assert parse_frames(h2.window_update(0, 0x7FFFFFFF)) == [(h2.WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff")]
    assert parse_frames(h2.window_update(9, 1)) == [(h2.WINDOW_UPDATE, 0, 9, b"\x00\x00\x00\x01")]


def test_goaway() -> None:
    assert parse_frames(h2.goaway(7)) == [(h2.GOAWAY, 0, 0, bytes.fromhex("00000007" "00000000"))]
    assert parse_frames(h2.goaway(0x101, h2.PROTOCOL_ERROR, b"bye")) == [
        (h2.GOAWAY, 0, 0, bytes.fromhex("00000101" "00000001") + b"bye")]


def test_settings_frame() -> None:
    payload = settings((h2.SETTINGS_MAX_FRAME_SIZE, 32768))
    assert parse_frames(h2.settings_frame(payload)) == [(h2.SETTINGS, 0, 0, payload)]


def test_frame_type_numbers_follow_the_rfc() -> None:
    assert (h2.DATA, h2.HEADERS, h2.RST_STREAM, h2.SETTINGS, h2.PING, h2.GOAWAY, h2.WINDOW_UPDATE,
            h2.CONTINUATION) == (0, 1, 3, 4, 6, 7, 8, 9)


# -- SETTINGS ---------------------------------------------------------------------------

def test_settings_params_reads_every_parameter() -> None:
    payload = settings((h2.SETTINGS_HEADER_TABLE_SIZE, 4096), (0x2, 0), (h2.SETTINGS_INITIAL_WINDOW_SIZE, 0xFFFFFFFF),
                       (h2.SETTINGS_MAX_FRAME_SIZE, 16777215), (0x6, 8192))
    assert h2.settings_params(payload) == {
        h2.SETTINGS_HEADER_TABLE_SIZE: 4096, 0x2: 0, h2.SETTINGS_INITIAL_WINDOW_SIZE: 0xFFFFFFFF,
        h2.SETTINGS_MAX_FRAME_SIZE: 16777215, 0x6: 8192}


def test_settings_params_empty_and_repeated() -> None:
    assert h2.settings_params(b"") == {}
    # RFC 9113 6.5.3: parameters are processed in order, so the last one wins.
    assert h2.settings_params(settings((0x4, 100), (0x5, 20000), (0x4, 200))) == {0x4: 200, 0x5: 20000}


@pytest.mark.parametrize(
    "given, kept",
    [
        ([], []),
        ([(h2.SETTINGS_HEADER_TABLE_SIZE, 4096)], []),
        ([(0x3, 100), (h2.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)], [(0x3, 100), (h2.SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)]),
        ([(0x2, 0), (h2.SETTINGS_HEADER_TABLE_SIZE, 65536), (0x5, 32768)], [(0x2, 0), (0x5, 32768)]),
        ([(h2.SETTINGS_HEADER_TABLE_SIZE, 1), (0x6, 9), (h2.SETTINGS_HEADER_TABLE_SIZE, 2)], [(0x6, 9)]),
        ([(h2.SETTINGS_HEADER_TABLE_SIZE, 0)], []),
    ],
    ids=["empty", "only-table-size", "others-only", "table-size-among-others", "table-size-twice", "already-zero"],
)
def test_without_header_table_sets_table_size_zero_and_keeps_the_rest(given, kept) -> None:
    out = h2.without_header_table(settings(*given))
    assert len(out) % 6 == 0
    pairs = [struct.unpack_from(">HI", out, i) for i in range(0, len(out), 6)]
    assert [p for p in pairs if p[0] == h2.SETTINGS_HEADER_TABLE_SIZE] == [(h2.SETTINGS_HEADER_TABLE_SIZE, 0)]
    assert [p for p in pairs if p[0] != h2.SETTINGS_HEADER_TABLE_SIZE] == kept
    assert h2.settings_params(out)[h2.SETTINGS_HEADER_TABLE_SIZE] == 0


# -- payloads with padding and priority -------------------------------------------------

FRAGMENT = b"\x82\x86\x84"


@pytest.mark.parametrize(
    "flags, payload",
    [
        (0, FRAGMENT),
        (h2.END_HEADERS | h2.END_STREAM, FRAGMENT),
        (h2.PADDED, b"\x03" + FRAGMENT + b"\x00\x00\x00"),
        (h2.PADDED, b"\x00" + FRAGMENT),
        (h2.PRIORITY_FLAG, b"\x80\x00\x00\x03\x10" + FRAGMENT),
        (h2.PADDED | h2.PRIORITY_FLAG, b"\x02" + b"\x00\x00\x00\x01\xff" + FRAGMENT + b"\x00\x00"),
        (h2.PADDED | h2.PRIORITY_FLAG | h2.END_HEADERS, b"\x00" + b"\x00\x00\x00\x01\xff" + FRAGMENT),
    ],
    ids=["plain", "end-flags", "padded", "padded-zero", "priority", "padded-priority", "padded-zero-priority"],
)
def test_block_fragment_of_headers(flags, payload) -> None:
    assert h2.block_fragment(h2.HEADERS, flags, payload) == FRAGMENT


def test_block_fragment_may_be_empty() -> None:
    assert h2.block_fragment(h2.HEADERS, h2.PADDED, b"\x02\x00\x00") == b""
    assert h2.block_fragment(h2.HEADERS, h2.PRIORITY_FLAG, b"\x00\x00\x00\x01\xff") == b""


def test_continuation_payload_is_all_fragment_whatever_the_flags() -> None:
    payload = b"\x03\x00\x00\x00\x01" + FRAGMENT
    assert h2.block_fragment(h2.CONTINUATION, h2.PADDED | h2.PRIORITY_FLAG | h2.END_HEADERS, payload) == payload


@pytest.mark.parametrize(
    "flags, payload",
    [
        (h2.PADDED, b"\x04abc"),  # padding = the whole payload
        (h2.PADDED, b"\xffab"),
        (h2.PADDED | h2.PRIORITY_FLAG, b"\x02\x00\x00\x00\x01\xff" + b"\x00"),  # padding eats into priority
        (h2.PRIORITY_FLAG, b"\x00\x00\x01"),  # priority fields cut off
        (h2.PADDED | h2.PRIORITY_FLAG, b"\x00\x00\x00"),
    ],
    ids=["pad-eq-length", "pad-past-length", "pad-into-priority", "short-priority", "short-padded-priority"],
)
def test_block_fragment_rejects_padding_past_the_frame(flags, payload) -> None:
    with pytest.raises(ValueError):
        h2.block_fragment(h2.HEADERS, flags, payload)


def test_block_fragment_rejects_an_empty_padded_payload() -> None:
    with pytest.raises(ValueError):
        h2.block_fragment(h2.HEADERS, h2.PADDED, b"")


def test_data_payload() -> None:
    assert h2.data_payload(0, b"\x03body") == b"\x03body"
    assert h2.data_payload(h2.END_STREAM, b"body") == b"body"
    assert h2.data_payload(h2.PADDED, b"\x03body\x00\x00\x00") == b"body"
    assert h2.data_payload(h2.PADDED | h2.END_STREAM, b"\x00body") == b"body"
    assert h2.data_payload(h2.PADDED, b"\x02\x00\x00") == b""


@pytest.mark.parametrize("payload", [b"\x05ab", b"\x03ab", b""], ids=["pad-past-length", "pad-eq-length", "empty"])
def test_data_payload_rejects_padding_past_the_frame(payload) -> None:
    with pytest.raises(ValueError):
        h2.data_payload(h2.PADDED, payload)


# -- gRPC status ------------------------------------------------------------------------

@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
def test_status_code_of_every_known_number(code) -> None:
    assert h2.status_code(str(code.value[0]).encode()) is code


@pytest.mark.parametrize("value", [None, b"", b"17", b"-1", b"99999", b"abc", b"1.0", b"0x1", b"\xff", b"1" * 5000])
def test_status_code_of_anything_else_is_unknown(value) -> None:
    assert h2.status_code(value) is grpc.StatusCode.UNKNOWN


@pytest.mark.parametrize(
    "value, text",
    [(None, ""), (b"", ""), (b"plain words", "plain words"), (b"caf%C3%A9", "caf\u00e9"), (b"100%25", "100%"),
     (b"a%2Fb%0Ac", "a/b\nc"), (b"1+1", "1+1"), (b"%FF", "\ufffd"), (b"\xff", "\ufffd"), (b"50% off", "50% off")],
)
def test_status_message_percent_decodes(value, text) -> None:
    assert h2.status_message(value) == text


MESSAGES = ["", "plain", "50% done", "already %41 escaped", "na\u00efve \u2013 \u00fcn\u00efc\u00f6d\u00e9 \u65e5\u672c",
            "line\nbreak\ttab\r", "1+1 = 2", "/runtime.v1.RuntimeService/Version?x=1&y=%", "\U0001f600 emoji", "x" * 2000]


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.OK],
                         ids=lambda c: c.name)
def test_trailers_only_is_a_complete_grpc_reply(message, code) -> None:
    [(ftype, flags, sid, block)] = parse_frames(h2.trailers_only(13, code, message))
    assert (ftype, flags, sid) == (h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 13)
    decoder = hpack.Decoder(max_header_list_size=1 << 20)
    fields = [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)]
    assert [n for n, _ in fields] == [b":status", b"content-type", b"grpc-status", b"grpc-message"]
    got = dict(fields)
    assert got[b":status"] == b"200"
    assert got[b"content-type"] == b"application/grpc"
    assert got[b"grpc-status"] == str(code.value[0]).encode()
    # gRPC's wire format: the message is percent-encoded into printable ASCII.
    assert all(0x20 <= c <= 0x7E for c in got[b"grpc-message"])
    assert h2.status_message(got[b"grpc-message"]) == message
    assert h2.status_code(got[b"grpc-status"]) is code
    with pytest.raises(hpack.HPACKDecodingError):
        decoder.decode(b"\xbe")  # the peer's dynamic table is untouched
    status = Reader().read(block, frozenset({b"grpc-status", b"grpc-message"}))  # as the relay reads it
    assert (h2.status_code(status[b"grpc-status"]), h2.status_message(status[b"grpc-message"])) == (code, message)


# -- gRPC messages and DATA frames ------------------------------------------------------

def test_grpc_message_prefix() -> None:
    assert h2.grpc_message(b"") == b"\x00\x00\x00\x00\x00"
    assert h2.grpc_message(b"x" * 300) == b"\x00\x00\x00\x01\x2c" + b"x" * 300


@pytest.mark.parametrize(
    "size, max_frame, lengths",
    [(10, 4, [4, 4, 2]), (8, 4, [4, 4]), (3, 4, [3]), (4, 4, [4]), (5, 1, [1] * 5), (40000, 16384, [16384, 16384, 7232])],
)
@pytest.mark.parametrize("end_stream", [True, False])
def test_data_frames_split_at_the_max_frame_size(size, max_frame, lengths, end_stream) -> None:
    data = bytes(i % 251 for i in range(size))
    pieces = list(h2.data_frames(11, data, max_frame, end_stream))
    assert [n for n, _ in pieces] == lengths
    frames = parse_frames(b"".join(f for _, f in pieces))
    assert [len(p) for _, _, _, p in frames] == lengths
    assert all(t == h2.DATA and sid == 11 for t, _, sid, _ in frames)
    assert b"".join(p for _, _, _, p in frames) == data
    flags = [f for _, f, _, _ in frames]
    assert flags == [0] * (len(lengths) - 1) + [h2.END_STREAM if end_stream else 0]


@pytest.mark.parametrize("end_stream, flags", [(True, h2.END_STREAM), (False, 0)])
def test_data_frames_of_an_empty_body(end_stream, flags) -> None:
    pieces = list(h2.data_frames(3, b"", 16384, end_stream))
    assert [n for n, _ in pieces] == [0]
    assert parse_frames(pieces[0][1]) == [(h2.DATA, flags, 3, b"")]


MESSAGE_BODIES = [(False, b"first"), (False, b""), (True, b"compressed\x00body"), (False, bytes(range(256)) * 2)]


def _wire(messages: list[tuple[bool, bytes]]) -> bytes:
    return b"".join(bytes([int(c)]) + len(b).to_bytes(4, "big") + b for c, b in messages)


def test_splitter_takes_several_messages_from_one_feed() -> None:
    splitter = h2.MessageSplitter(1 << 20)
    assert splitter.feed(_wire(MESSAGE_BODIES)) == MESSAGE_BODIES
    assert splitter.pending == 0


def test_splitter_with_a_split_at_every_offset() -> None:
    wire = _wire(MESSAGE_BODIES)
    ends, total = [], 0
    for _, body in MESSAGE_BODIES:
        total += 5 + len(body)
        ends.append(total)
    for cut in range(len(wire) + 1):
        splitter = h2.MessageSplitter(1 << 20)
        first = splitter.feed(wire[:cut])
        done = sum(1 for e in ends if e <= cut)
        assert first == MESSAGE_BODIES[:done], cut
        assert splitter.pending == cut - (ends[done - 1] if done else 0), cut
        assert first + splitter.feed(wire[cut:]) == MESSAGE_BODIES, cut
        assert splitter.pending == 0


def test_splitter_fed_one_byte_at_a_time() -> None:
    splitter = h2.MessageSplitter(1 << 20)
    got = []
    for byte in _wire(MESSAGE_BODIES):
        got += splitter.feed(bytes([byte]))
    assert got == MESSAGE_BODIES
    assert splitter.pending == 0


def test_splitter_holds_an_incomplete_message() -> None:
    splitter = h2.MessageSplitter(1 << 20)
    assert splitter.feed(b"\x00\x00\x00\x01\x00" + b"x" * 100) == []  # 256 bytes announced
    assert splitter.pending == 105
    assert splitter.feed(b"y" * 156 + b"\x00\x00") == [(False, b"x" * 100 + b"y" * 156)]
    assert splitter.pending == 2


def test_splitter_skips_a_message_declared_above_its_limit_without_holding_it() -> None:
    splitter = h2.MessageSplitter(100)
    big = h2.grpc_message(b"b" * 5000)
    data = big + h2.grpc_message(b"after")
    got = []
    for i in range(0, len(data), 7):  # in small pieces: the skip spans many feeds
        got += splitter.feed(data[i:i + 7])
        assert splitter.pending < 105  # never more than one allowed message held
    assert got == [(False, b"after")]
