"""The relay's channel to the runtime (Upstream: the relay's own calls, and the gRPC
transport's) against a runtime that is slow to answer a new connection, as containerd
is on a busy node or just after a restart: its HTTP/2 SETTINGS come a second late. A
call with a 10 s deadline waits for them; it used to fail after 0.1 s with UNAVAILABLE
"connection attempt timed out before receiving SETTINGS frame" (the channel's
grpc.min_reconnect_backoff_ms, which gRPC takes as each attempt's connect timeout), and
so did the engine tests' start-up adoption under load."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from fake_runtime import FakeRuntime

from cri_resmgr.transport.upstream import Upstream
from tests.harness.loop import LoopThread

LATE = 1.0  # seconds each new connection is held before the runtime sees it


class LateProxy:
    """A unix socket in front of the runtime's that holds every new connection LATE
    seconds before passing its bytes on both ways: the runtime's SETTINGS arrive late."""

    def __init__(self, path: str, target: str):
        self.path, self.target = path, target
        self.server: asyncio.Server | None = None
        self.held = 0
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._handle, self.path)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            self.held += 1
            await asyncio.sleep(LATE)
            r2, w2 = await asyncio.open_unix_connection(self.target)
            await asyncio.gather(_pipe(r, w2), _pipe(r2, w), return_exceptions=True)
        finally:
            w.close()
            self._tasks.discard(task)


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    finally:
        w.close()


@pytest.fixture
def late_runtime(tmp_path):
    loop = LoopThread()
    runtime = FakeRuntime(str(tmp_path / "runtime.sock"))
    proxy = LateProxy(str(tmp_path / "late.sock"), runtime.socket_path)
    loop.run(runtime.start())
    loop.run(proxy.start())
    try:
        yield loop, proxy
    finally:
        with contextlib.suppress(Exception):
            loop.run(proxy.stop())
        loop.run(runtime.stop())
        loop.close()


def test_a_call_waits_for_a_runtime_slow_to_answer_a_new_connection(late_runtime):
    loop, proxy = late_runtime

    async def call() -> str:
        up = Upstream(proxy.path)
        try:
            return (await up.version(timeout=10)).runtime_name
        finally:
            await up.close()

    assert loop.run(call()) == "fake"  # answered, within its deadline
    assert proxy.held >= 1  # through the late connection
