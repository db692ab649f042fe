"""A raw HTTP/2 client for tests: frames written byte by byte, as a hostile or
broken client would, and the relay's answers read back frame by frame."""

from __future__ import annotations

import socket
import time

import hpack

from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.headerblock import encode_literals


def request_block(path: str) -> bytes:
    return encode_literals([(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
                            (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")])


def message(body: bytes, declared: int | None = None) -> bytes:
    """A gRPC message; `declared` lies about its length."""
    return b"\x00" + (len(body) if declared is None else declared).to_bytes(4, "big") + body


class RawClient:
    def __init__(self, path: str, timeout: float = 10.0):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = bytearray()
        self.decoder = hpack.Decoder()
        self.closed = False
        self._answer(h2.PREFACE + h2.settings_frame(b""))  # quiet: a turned-away client reads the close

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def headers(self, sid: int, path: str, end_stream: bool = False) -> None:
        flags = h2.END_HEADERS | (h2.END_STREAM if end_stream else 0)
        self.send(h2.frame(h2.HEADERS, flags, sid, request_block(path)))

    def data(self, sid: int, payload: bytes, end_stream: bool = False, frame_size: int = 16384) -> None:
        for _, f in h2.data_frames(sid, payload, frame_size, end_stream):
            self.send(f)

    def next_frame(self) -> tuple[int, int, int, bytes] | None:
        """(type, flags, stream, payload), answering SETTINGS and PING; None once closed."""
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    ftype, flags = self.buf[3], self.buf[4]
                    sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
                    payload = bytes(self.buf[9:9 + length])
                    del self.buf[:9 + length]
                    if ftype == h2.SETTINGS and not flags & h2.ACK:
                        self._answer(h2.frame(h2.SETTINGS, h2.ACK, 0))
                    elif ftype == h2.PING and not flags & h2.ACK:
                        self._answer(h2.frame(h2.PING, h2.ACK, 0, payload))
                    return ftype, flags, sid, payload
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self.buf += chunk

    def _answer(self, frame: bytes) -> None:
        try:
            self.send(frame)
        except OSError:  # the relay closed; what it sent before is still read
            pass

    def until(self, ok, timeout: float = 10.0) -> tuple[int, int, int, bytes] | None:
        """Reads frames until `ok(frame)`; returns it, or None if the connection closed first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            f = self.next_frame()
            if f is None:
                return None
            if f[0] in (h2.HEADERS, h2.CONTINUATION):
                fields = dict(self.decoder.decode(h2.block_fragment(f[0], f[1], f[3]), raw=True))
                f = (f[0], f[1], f[2], fields)
            if ok(f):
                return f
        raise TimeoutError("no such frame in time")

    def status(self, sid: int) -> tuple[int, str] | None:
        """The grpc-status and message that end stream `sid`."""
        f = self.until(lambda f: f[0] == h2.HEADERS and f[2] == sid and b"grpc-status" in f[3])
        if f is None:
            return None
        return int(f[3][b"grpc-status"]), h2.status_message(f[3].get(b"grpc-message"))

    def goaway(self) -> int | None:
        """The error code of the GOAWAY the relay sends before it closes."""
        f = self.until(lambda f: f[0] == h2.GOAWAY)
        return None if f is None else int.from_bytes(f[3][4:8], "big")

    def close(self) -> None:
        self.sock.close()
