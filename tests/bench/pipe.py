"""A bare byte pipe between two unix sockets: the floor under the relay (bench only).

Each connection accepted on the listening socket gets its own connection to the
upstream socket, and bytes go across as they are read: one asyncio Protocol
writing into the other's transport, no parsing, nothing buffered but what a
transport holds. It runs on the same event loop as the relay (uvloop when
installed, `cri_resmgr.transport.eventloop`), in its own process, so that the
relay bench can measure it in the same rounds as direct and the relay: what the
relay costs beyond it is the relay's, the rest is Python's and the kernel's.

    python -m tests.bench.pipe LISTEN_SOCKET UPSTREAM_SOCKET
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from cri_resmgr.transport import eventloop, sockets

__all__ = ["PipeProcess", "serve", "main"]


class _Side(asyncio.Protocol):
    """One end of a piped connection; `peer` is the other end once both exist."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self.peer: _Side | None = None
        self.early = bytearray()  # read before the peer existed (uvloop may hand over one read)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pair(self, peer: _Side) -> None:
        self.peer = peer
        if self.early:
            peer.transport.write(bytes(self.early))
            self.early.clear()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.early += data
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.transport.close()

    # Flow control: a side that cannot write stops the other side's reads.
    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.resume_reading()


class _ClientSide(_Side):
    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport.pause_reading()
        asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, runtime = await loop.create_unix_connection(_Side, self.upstream)
        except OSError:
            self.transport.close()
            return
        runtime.pair(self)
        self.pair(runtime)
        if self.transport.is_closing():
            runtime.transport.close()
        else:
            self.transport.resume_reading()


async def serve(listen: str, upstream: str) -> None:
    """Pipes every connection to `listen` to `upstream` until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    old = os.umask(0o177)  # the socket is the owner's only, as the relay's
    try:
        server = await loop.create_unix_server(lambda: _ClientSide(upstream), listen)
    finally:
        os.umask(old)
    await stop.wait()
    server.close()
    try:
        os.unlink(listen)
    except FileNotFoundError:
        pass


class PipeProcess:
    """The pipe as a child process, started and stopped by PID, like `RelayProcess`."""

    def __init__(self, socket_path: Path, upstream: str):
        self.socket = str(socket_path)
        self.upstream = sockets.strip_scheme(upstream)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return "unix://" + self.socket

    def start(self, timeout: float = 30.0) -> PipeProcess:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.bench.pipe", self.socket, self.upstream],
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not sockets.is_live(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the byte pipe did not serve on {self.socket} within {timeout}s")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("listen")
    parser.add_argument("upstream")
    args = parser.parse_args(argv)
    eventloop.run(serve(args.listen, args.upstream))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
