"""The relay's event loop (transport/eventloop.py), and the frame relay on uvloop."""

from __future__ import annotations

import asyncio
import importlib
import threading

import grpc
import pytest
from fake_runtime import FakeRuntime

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport import eventloop
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.methods import MethodTable

V1 = "/runtime.v1.RuntimeService/"


def test_the_choice_of_loop(monkeypatch):
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.loop_factory("asyncio") == ("asyncio", None)
    with pytest.raises(ValueError, match="CRI_RESMGR_EVENT_LOOP='trio': expected uvloop or asyncio"):
        eventloop.loop_factory("trio")
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.loop_factory() == ("asyncio", None)


def test_without_uvloop_asyncio_runs_unless_uvloop_is_asked_for(monkeypatch):
    real = importlib.import_module

    def no_uvloop(name, *args):
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_uvloop)
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.loop_factory() == ("asyncio", None)
    with pytest.raises(ValueError, match="uvloop is not installed"):
        eventloop.loop_factory("uvloop")

    async def loop_type() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert eventloop.run(loop_type()).startswith("asyncio")


def test_run_uses_uvloop_when_installed(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(eventloop.ENV, raising=False)

    async def loop_type() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert eventloop.loop_factory()[0] == "uvloop"
    assert eventloop.run(loop_type()).startswith("uvloop")


def test_the_frame_relay_on_uvloop_serves_new_connections_at_once(tmp_path):
    """uvloop may hand a protocol the client's first bytes before the pause asked in
    connection_made takes effect; they must wait for the runtime side, not fail."""
    uvloop = pytest.importorskip("uvloop")
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    runtime_sock, relay_sock = str(tmp_path / "runtime.sock"), str(tmp_path / "relay.sock")
    fake = FakeRuntime(runtime_sock)
    run(fake.start())

    async def start() -> FrameRelay:
        relay = FrameRelay(relay_sock, runtime_sock, MethodTable())
        await relay.start()
        return relay

    relay = run(start())
    try:
        for _ in range(10):  # each a new connection: its first read races the pause
            with grpc.insecure_channel("unix://" + relay_sock) as channel:
                reply = channel.unary_unary(V1 + "Version")(pb.VersionRequest().SerializeToString(), timeout=10)
                assert pb.VersionResponse.FromString(reply).runtime_name == "fake"
    finally:
        run(relay.stop(1))
        run(fake.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
