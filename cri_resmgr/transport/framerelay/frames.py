"""HTTP/2 frames (RFC 9113) and gRPC messages, as the frame relay reads and writes them."""

from __future__ import annotations

import struct
import urllib.parse
from collections.abc import Iterator

import grpc

from cri_resmgr.transport.framerelay.headerblock import encode_literals

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADER_LEN = 9

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = 16384

_SETTING = struct.Struct(">HI")
# A frame header: the 24-bit length in two parts, type, flags, stream id (and its reserved bit).
HEAD = struct.Struct(">HBBBI")
_CODES = {s.value[0]: s for s in grpc.StatusCode}


class PeerError(ValueError):
    """The peer broke the protocol: the connection ends with GOAWAY carrying `code`."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR):
        super().__init__(message)
        self.code = code


def header(length: int, ftype: int, flags: int, stream_id: int) -> bytes:
    return length.to_bytes(3, "big") + bytes((ftype, flags)) + stream_id.to_bytes(4, "big")


def frame(ftype: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return header(len(payload), ftype, flags, stream_id) + payload


def rst_stream(stream_id: int, error: int = CANCEL) -> bytes:
    return frame(RST_STREAM, 0, stream_id, error.to_bytes(4, "big"))


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def goaway(last_stream_id: int, error: int = NO_ERROR, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, last_stream_id.to_bytes(4, "big") + error.to_bytes(4, "big") + debug)


def complete_frames(buf: bytes | bytearray, pos: int,
                    max_length: int = DEFAULT_MAX_FRAME) -> Iterator[tuple[int, int, int, int, int]]:
    """(start, end, type, flags, stream id) of each whole frame in `buf` from `pos` on.

    A frame longer than `max_length` (the receiver's SETTINGS_MAX_FRAME_SIZE) is
    refused from its header: an incomplete frame is never buffered beyond it.
    """
    n = len(buf)
    unpack = HEAD.unpack_from
    while n - pos >= HEADER_LEN:
        high, low, ftype, flags, sid = unpack(buf, pos)  # one call per header: the relay reads every frame's
        length = high << 8 | low
        if length > max_length:
            raise too_long(length, max_length)
        end = pos + HEADER_LEN + length
        if end > n:
            return
        yield pos, end, ftype, flags, sid & 0x7FFFFFFF
        pos = end


def too_long(length: int, max_length: int) -> PeerError:
    return PeerError(f"frame of {length} bytes exceeds SETTINGS_MAX_FRAME_SIZE {max_length}", FRAME_SIZE_ERROR)


def settings_params(payload: bytes) -> dict[int, int]:
    return {k: v for k, v in (_SETTING.unpack_from(payload, i) for i in range(0, len(payload) - 5, 6))}


def without_header_table(payload: bytes) -> bytes:
    """A SETTINGS payload that tells the peer's encoder to use no dynamic table.

    Header blocks then carry no state from one to the next, so the relay can
    hold one back or answer a call itself without the decoders losing step.
    """
    out = bytearray()
    for i in range(0, len(payload) - 5, 6):
        key, value = _SETTING.unpack_from(payload, i)
        if key != SETTINGS_HEADER_TABLE_SIZE:
            out += _SETTING.pack(key, value)
    out += _SETTING.pack(SETTINGS_HEADER_TABLE_SIZE, 0)
    return bytes(out)


def settings_frame(payload: bytes) -> bytes:
    return frame(SETTINGS, 0, 0, payload)


def block_fragment(ftype: int, flags: int, payload: bytes) -> bytes:
    """The header block fragment of a HEADERS or CONTINUATION payload."""
    if ftype == CONTINUATION:
        return payload
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            raise ValueError("padded HEADERS frame without a pad length")
        start = 1
        end -= payload[0]
    if flags & PRIORITY_FLAG:
        start += 5
    if start > end:
        raise ValueError("HEADERS padding exceeds the frame")
    return payload[start:end]


def data_payload(flags: int, payload: bytes) -> bytes:
    if flags & PADDED:
        if not payload or payload[0] >= len(payload):
            raise ValueError("DATA padding exceeds the frame")
        return payload[1:len(payload) - payload[0]]
    return payload


def status_code(value: bytes | None) -> grpc.StatusCode:
    if value is None:
        return grpc.StatusCode.UNKNOWN
    try:
        return _CODES.get(int(value), grpc.StatusCode.UNKNOWN)
    except ValueError:
        return grpc.StatusCode.UNKNOWN


def status_message(value: bytes | None) -> str:
    return urllib.parse.unquote(value.decode("utf-8", "replace")) if value else ""


def _status_fields(code: grpc.StatusCode, message: str) -> list[tuple[bytes, bytes]]:
    return [(b"grpc-status", str(code.value[0]).encode()),
            (b"grpc-message", urllib.parse.quote(message, safe=" ").encode())]


def trailers_only(stream_id: int, code: grpc.StatusCode, message: str) -> bytes:
    """A complete gRPC error reply: one HEADERS frame, no body."""
    block = encode_literals([(b":status", b"200"), (b"content-type", b"application/grpc"),
                             *_status_fields(code, message)])
    return frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block)


def trailers(stream_id: int, code: grpc.StatusCode, message: str) -> bytes:
    """The status that ends a reply whose headers have been sent."""
    return frame(HEADERS, END_HEADERS | END_STREAM, stream_id, encode_literals(_status_fields(code, message)))


def grpc_message(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def data_frames(stream_id: int, data: bytes, max_frame: int, end_stream: bool) -> Iterator[tuple[int, bytes]]:
    """(flow-controlled length, frame bytes) for a body split to the peer's frame size."""
    if not data:
        yield 0, frame(DATA, END_STREAM if end_stream else 0, stream_id)
        return
    for start in range(0, len(data), max_frame):
        chunk = data[start:start + max_frame]
        last = start + max_frame >= len(data)
        yield len(chunk), frame(DATA, END_STREAM if end_stream and last else 0, stream_id, chunk)


class MessageSplitter:
    """Splits a stream's DATA into gRPC length-prefixed messages.

    A message declared longer than `max_message` is skipped, not buffered: the
    runtime refuses it anyway, and a dump of it would hold it whole.
    """

    def __init__(self, max_message: int) -> None:
        self._buf = bytearray()
        self._max = max_message
        self._skip = 0  # bytes of an oversized message still to come

    def feed(self, data: bytes) -> list[tuple[bool, bytes]]:
        """(compressed, body) for each message completed by `data`."""
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            data = data[skipped:]
        self._buf += data
        out = []
        buf = self._buf
        while len(buf) >= 5:
            length = int.from_bytes(buf[1:5], "big")
            if length > self._max:
                self._skip = max(0, 5 + length - len(buf))
                del buf[:5 + length]
                continue
            if len(buf) < 5 + length:
                break
            out.append((bool(buf[0]), bytes(buf[5:5 + length])))
            del buf[:5 + length]
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)
