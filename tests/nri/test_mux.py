"""NRI's multiplexer, byte by byte (cri_resmgr/nri/mux.py)."""

from __future__ import annotations

import asyncio
import socket

from cri_resmgr.nri import mux
from cri_resmgr.nri.mux import Mux


async def _socketpair() -> tuple[Mux, socket.socket]:
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    theirs.setblocking(False)
    return Mux(reader, writer), theirs


async def _recv_all(sock: socket.socket, n: int) -> bytes:
    loop = asyncio.get_running_loop()
    out = b""
    while len(out) < n:
        chunk = await loop.sock_recv(sock, n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def test_frame_header_is_conn_id_and_length_big_endian() -> None:
    assert mux.frame(2, b"abc") == bytes([0, 0, 0, 2, 0, 0, 0, 3]) + b"abc"


def test_frames_are_demultiplexed_from_split_and_coalesced_reads() -> None:
    async def main() -> tuple[bytes, bytes]:
        m, peer = await _socketpair()
        one, two = m.open(1), m.open(2)
        running = asyncio.create_task(m.run())
        data = mux.frame(1, b"hello ") + mux.frame(2, b"runtime") + mux.frame(5, b"nobody") + mux.frame(1, b"plugin")
        loop = asyncio.get_running_loop()
        for i in range(0, len(data), 3):  # split mid-header and mid-payload
            await loop.sock_sendall(peer, data[i:i + 3])
            await asyncio.sleep(0)
        got1 = await one.read() + await one.read()
        got2 = await two.read()
        peer.close()
        await running
        assert await one.read() == b"" and await two.read() == b""  # closed
        return got1, got2

    got1, got2 = asyncio.run(main())
    assert (got1, got2) == (b"hello plugin", b"runtime")


def test_writes_go_out_in_frames_of_at_most_4096_bytes() -> None:
    async def main() -> bytes:
        m, peer = await _socketpair()
        payload = bytes(range(256)) * 40  # 10240 bytes
        m.open(2).write(payload)
        await m.drain()
        wire = await _recv_all(peer, 10240 + 3 * 8)
        m.close()
        peer.close()
        return wire

    wire = asyncio.run(main())
    sizes, pos, body = [], 0, b""
    while pos < len(wire):
        cid, n = mux.MUX_HEADER.unpack_from(wire, pos)
        assert cid == 2
        sizes.append(n)
        body += wire[pos + 8:pos + 8 + n]
        pos += 8 + n
    assert sizes == [4096, 4096, 2048] and body == bytes(range(256)) * 40


def test_a_frame_announcing_more_than_the_maximum_closes_the_connection() -> None:
    async def main() -> tuple[str | None, bytes]:
        m, peer = await _socketpair()
        conn = m.open(1)
        running = asyncio.create_task(m.run())
        await asyncio.get_running_loop().sock_sendall(peer, mux.MUX_HEADER.pack(1, mux.MAX_PAYLOAD + 1))
        await running
        got = await conn.read()
        peer.close()
        return m.error, got

    error, got = asyncio.run(main())
    assert got == b"" and error is not None and "announces" in error


def test_a_connection_cut_mid_frame_is_reported_and_closes_every_logical_connection() -> None:
    async def main() -> tuple[str | None, bytes, bool]:
        m, peer = await _socketpair()
        conn = m.open(2)
        running = asyncio.create_task(m.run())
        await asyncio.get_running_loop().sock_sendall(peer, mux.MUX_HEADER.pack(2, 100) + b"x" * 10)
        peer.close()
        await running
        late = m.open(7)  # opened after the close: reads closed at once
        return m.error, await conn.read() + await late.read(), m.closed

    error, got, closed = asyncio.run(main())
    assert closed and got == b"" and error is not None and "middle of a frame" in error


def test_writing_to_a_closed_multiplexer_raises_connection_error() -> None:
    async def main() -> None:
        m, peer = await _socketpair()
        m.close()
        peer.close()
        try:
            m.write(1, b"x")
        except ConnectionError:
            return
        raise AssertionError("write on a closed mux did not raise")

    asyncio.run(main())
