"""The relay bench's floor (tests/bench/pipe.py): a bare byte pipe between two unix
sockets, as its own process, and the table that sets the relay beside it."""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.pipe import PipeProcess
from tests.bench.relay_report import format_floor


class _Upstream:
    """A unix socket server that echoes what it reads and records it; `drop()`
    closes every accepted connection."""

    def __init__(self, path: Path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen()
        self.conns: list[socket.socket] = []
        self.got = bytearray()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.got += data
            c.sendall(data)

    def drop(self) -> None:
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # dropped before
            c.close()
        self.conns.clear()

    def close(self) -> None:
        self.drop()
        self.sock.close()


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[_Upstream]:
    u = _Upstream(tmp_path / "up.sock")
    yield u
    u.close()


@pytest.fixture
def pipe(tmp_path: Path, upstream: _Upstream) -> Iterator[PipeProcess]:
    p = PipeProcess(tmp_path / "pipe.sock", "unix://" + upstream.path).start()
    yield p
    p.stop()


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def test_bytes_go_both_ways_unchanged_and_large_writes_arrive_whole(pipe: PipeProcess, upstream: _Upstream):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(pipe.socket)
        s.sendall(b"hello")
        assert _recv_exactly(s, 5) == b"hello"
        big = os.urandom(4 << 20)  # beyond the socket buffers: flow control holds it, nothing is lost
        sender = threading.Thread(target=s.sendall, args=(big,), daemon=True)
        sender.start()
        assert _recv_exactly(s, len(big)) == big
        sender.join(10)
    assert bytes(upstream.got[:5]) == b"hello" and len(upstream.got) == 5 + len(big)


def test_the_socket_is_the_owners_only(pipe: PipeProcess):
    assert stat.S_IMODE(os.stat(pipe.socket).st_mode) == 0o600


def test_a_closed_upstream_closes_the_client_and_the_pipe_stays_up(pipe: PipeProcess, upstream: _Upstream):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(pipe.socket)
        s.sendall(b"x")
        assert _recv_exactly(s, 1) == b"x"
        upstream.drop()
        assert s.recv(16) == b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # a new connection gets a new upstream one
        s.settimeout(10)
        s.connect(pipe.socket)
        s.sendall(b"y")
        assert _recv_exactly(s, 1) == b"y"


def test_an_unreachable_upstream_closes_the_client(tmp_path: Path):
    p = PipeProcess(tmp_path / "pipe.sock", str(tmp_path / "nothing.sock")).start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(p.socket)
            assert s.recv(16) == b""
    finally:
        p.stop()
    assert p.proc is None and not os.path.exists(tmp_path / "pipe.sock")


def _cell(ratio: float, pipe_ratio: float, relay_pipe: float) -> dict[str, float]:
    return {"ratio_p50": ratio, "pipe_ratio_p50": pipe_ratio, "relay_pipe_ratio_p50": relay_pipe,
            "ratio": ratio - 0.5, "pipe_ratio": pipe_ratio - 0.5, "relay_pipe_ratio": relay_pipe - 0.5}


def test_the_floor_table_sets_each_target_beside_the_pipe_of_the_same_run():
    cell = _cell(1.4, 1.2, 1.17)
    result = {"callers": [1, 8, 32],
              "latency": {"Version": {**cell, "pipe": {}}, "Old": {"ratio_p50": 1.0}},
              "throughput": {"Version": {"32": {**cell, "pipe": {}}}}}
    table = format_floor(result).splitlines()
    assert "calls/s at 32 relay/direct" in table[0]
    assert table[2].split() == ["Version", "1.40", "1.20", "1.17", "0.90", "0.70", "0.67"]
    assert len(table) == 3  # a run without the pipe's figures ("Old") gets no row
    assert format_floor({"callers": [1], "latency": {"Old": {}}, "throughput": {}}) == ""
