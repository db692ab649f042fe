"""A start that fails at any step leaves nothing behind (frontend/services.py: every
service is undone on one AsyncExitStack): the state directory's lock released, the metrics
port closed and its thread ended, the runtime channels closed, no socket file of ours left,
no task running; the front end returns 1 with one error line. And a stop asked for undoes
the same. In-process, both front ends, each step that can fail."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri_resmgr.config import Settings
from cri_resmgr.frontend import statelock
from cri_resmgr.nri import app as nri_app
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.relay import app as relay_app
from cri_resmgr.transport.upstream import Upstream
from tests.harness.loop import LoopThread
from tests.transport.fake_runtime import FakeRuntime


@pytest.fixture
def where(tmp_path: Path) -> Iterator[Path]:
    # Short: the sockets' paths must fit sun_path (108 bytes) unless a test wants one too long.
    d = Path(os.path.realpath(tmp_path))
    yield d


@pytest.fixture
def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def closed_channels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the runtime channels closed (the real close runs)."""
    closed: list[str] = []
    real = Upstream.close

    async def close(self: Upstream) -> None:
        closed.append(self.path)
        await real(self)

    monkeypatch.setattr(Upstream, "close", close)
    return closed


def relay_settings(d: Path, port: int, **more: Any) -> Settings:
    fields: dict[str, Any] = dict(
        relay_socket=str(d / "relay.sock"), runtime_socket=str(d / "runtime.sock"),
        image_socket=str(d / "runtime.sock"), config_socket=str(d / "config.sock"), agent_socket="-",
        agent_export_interval=0, state_dir=str(d / "state"), host_root=str(d / "host"),
        metrics_address=f"127.0.0.1:{port}", runtime_wait_timeout=30.0, reconcile_period=0)
    fields.update(more)
    return Settings(**fields)


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def handlers() -> dict[int, Any]:
    return {sig: signal.getsignal(sig) for sig in SIGNALS}


def run_relay(settings: Settings, runtime: bool = True, before: Any = None) -> tuple[int, set[asyncio.Task[Any]]]:
    """relay.app.run, with a Version-answering runtime on settings.runtime_socket (on a loop of
    its own); its code, and the tasks left on its loop when it returned. The signal handlers
    are the ones before it once it returned, its loop still running: a SIGHUP after the engine
    closed reloads nothing, a SIGTERM sets no stale event."""

    async def scenario() -> tuple[int, set[asyncio.Task[Any]]]:
        was = handlers()
        task = asyncio.ensure_future(relay_app.run(settings, default_registry()))
        if before is not None:
            await before(task)
        code = await task
        assert handlers() == was
        await asyncio.sleep(0)  # what a cancellation leaves runs its course
        return code, asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    with LoopThread() as other:
        fake = FakeRuntime(settings.runtime_socket)
        if runtime:
            other.run(fake.start())
        try:
            return asyncio.run(scenario())
        finally:
            other.run(fake.stop())


def assert_nothing_left(d: Path, port: int, *, lock: bool = True) -> None:
    if lock:  # another holder succeeds at once
        statelock.acquire(str(d / "state"), "the test").release()
    with socket.socket() as s:  # the metrics port is free again
        s.bind(("127.0.0.1", port))
    for t in threading.enumerate():
        if t.name == "metrics-http":
            t.join(10)
            assert not t.is_alive()
    assert not (d / "relay.sock").exists()
    assert not (d / "config.sock").exists()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# -- the relay -----------------------------------------------------------------------------------


def test_relay_a_live_relay_socket_is_refused_before_anything_starts(where: Path, port: int,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(where / "relay.sock"))
        other.listen()
        code, tasks = run_relay(relay_settings(where, port), runtime=False)
        assert (where / "relay.sock").exists()  # the other relay's, left alone
    os.unlink(where / "relay.sock")
    assert code == 1 and not tasks
    assert errors(caplog) == [f"relay socket {where / 'relay.sock'} is in use: another instance is already running"]
    assert not (where / "state").exists()  # refused before the lock
    assert_nothing_left(where, port)


def test_relay_a_state_dir_held_is_refused_and_nothing_is_bound(where: Path, port: int,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    held = statelock.acquire(str(where / "state"), "cri-resmgr NRI plugin")
    try:
        code, tasks = run_relay(relay_settings(where, port), runtime=False)
        assert code == 1 and not tasks
        assert len(errors(caplog)) == 1 and "is in use by cri-resmgr NRI plugin" in errors(caplog)[0]
        assert_nothing_left(where, port, lock=False)
    finally:
        held.release()


def test_relay_a_metrics_address_taken_releases_the_lock(where: Path, port: int,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        code, tasks = run_relay(relay_settings(where, port), runtime=False)
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in errors(caplog)[0]
    assert_nothing_left(where, port)


def test_relay_a_runtime_that_never_answers_closes_its_channel(where: Path, port: int, closed_channels: list[str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    code, tasks = run_relay(relay_settings(where, port, runtime_wait_timeout=0.3), runtime=False)
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and "not ready after 0s" in errors(caplog)[0]
    assert closed_channels == [str(where / "runtime.sock")]
    assert_nothing_left(where, port)


def test_relay_stopped_while_waiting_for_the_runtime_undoes_its_start(
        where: Path, port: int, closed_channels: list[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cri_resmgr")

    async def stop_while_waiting(task: asyncio.Future[int]) -> None:
        for _ in range(600):  # the lock, the metrics port, the channel and the signal handlers in one step
            if (where / "state" / "lock").exists() or task.done():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # waiting for the runtime, which never answers
        os.kill(os.getpid(), signal.SIGTERM)

    code, tasks = run_relay(relay_settings(where, port, runtime_wait_timeout=None), runtime=False,
                            before=stop_while_waiting)
    assert code == 0 and not tasks, errors(caplog)
    assert "stopped while waiting for the runtime" in caplog.text and not errors(caplog)
    assert closed_channels == [str(where / "runtime.sock")]
    assert_nothing_left(where, port)


def test_relay_a_bad_configuration_closes_the_engine_and_the_channel(where: Path, port: int,
                                                                     closed_channels: list[str],
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    (where / "bad.yaml").write_text("policy: [\n")
    code, tasks = run_relay(relay_settings(where, port, force_config=str(where / "bad.yaml")))
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and "bad.yaml: invalid YAML" in errors(caplog)[0]
    assert closed_channels == [str(where / "runtime.sock")]
    assert_nothing_left(where, port)


def test_relay_a_config_socket_that_cannot_be_bound_stops_the_relay_it_started(
        where: Path, port: int, closed_channels: list[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    deep = where / ("d" * 60) / ("e" * 60)  # past sun_path's 108 bytes: the bind fails, after the relay's
    deep.mkdir(parents=True)
    code, tasks = run_relay(relay_settings(where, port, config_socket=str(deep / "config.sock")))
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and errors(caplog)[0].startswith("cannot serve: ")
    assert "relay serving on" in caplog.text  # it had started: stopped and its socket removed
    assert closed_channels == [str(where / "runtime.sock")]
    assert_nothing_left(where, port)


def test_relay_stopped_by_sigterm_undoes_the_same(where: Path, port: int, closed_channels: list[str],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cri_resmgr")

    async def stop_once_serving(task: asyncio.Future[int]) -> None:
        for _ in range(600):  # the signal handler is in place before the relay socket exists
            if (where / "config.sock").exists() or task.done():
                break
            await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    code, tasks = run_relay(relay_settings(where, port, reconcile_period=30), before=stop_once_serving)
    assert code == 0 and not tasks, errors(caplog)
    assert "shutting down" in caplog.text and not errors(caplog)
    assert closed_channels == [str(where / "runtime.sock")]
    assert_nothing_left(where, port)


def test_relay_sighup_rereads_the_forced_config_and_reopens_the_dump(where: Path, port: int,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """SIGHUP through the shared services (logrotate's postrotate): the moved dump file is
    written anew, -force-config is read again; and after the stop, no handler of ours is left."""
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    forced, dump = where / "forced.yaml", where / "cri.dump"
    forced.write_text("policy:\n  Active: none\n")

    async def rotate_then_stop(task: asyncio.Future[int]) -> None:
        for _ in range(600):
            if (where / "config.sock").exists() or task.done():
                break
            await asyncio.sleep(0.05)
        assert dump.exists(), errors(caplog)
        dump.rename(where / "cri.dump.1")
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(600):
            if (dump.exists() and "SIGHUP: reloaded" in caplog.text) or task.done():
                break
            await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    missed: list[int] = []  # a SIGHUP the relay did not take is the test's, not the end of pytest
    previous = signal.signal(signal.SIGHUP, lambda sig, _: missed.append(sig))
    try:
        code, tasks = run_relay(relay_settings(where, port, force_config=str(forced), dump=("full:.*",),
                                               dump_file=str(dump)), before=rotate_then_stop)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert not missed
    assert code == 0 and not tasks, errors(caplog)
    assert dump.exists() and f"SIGHUP: reloaded {forced}" in caplog.text and not errors(caplog)
    assert_nothing_left(where, port)


# -- the NRI plugin ------------------------------------------------------------------------------


def nri_settings(d: Path, port: int, **more: Any) -> Settings:
    fields: dict[str, Any] = dict(
        config_socket=str(d / "config.sock"), agent_socket="-", agent_export_interval=0, state_dir=str(d / "state"),
        host_root=str(d / "host"), metrics_address=f"127.0.0.1:{port}", reconcile_period=0)
    fields.update(more)
    return Settings(**fields)


def run_plugin(settings: Settings, d: Path, handed_fd: int | None = None) -> tuple[int, set[asyncio.Task[Any]]]:
    """nri.app.run with no runtime on its NRI socket (it refuses before dialling), or with
    `handed_fd` as the connection a runtime handed over; signal handlers as before it once done."""

    async def scenario() -> tuple[int, set[asyncio.Task[Any]]]:
        was = handlers()
        nri = nri_app.NriSettings(socket=str(d / "nri.sock"), handed_fd=handed_fd)
        code = await asyncio.wait_for(nri_app.run(settings, nri, default_registry()), 60)
        assert handlers() == was
        await asyncio.sleep(0)
        return code, asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    return asyncio.run(scenario())


def test_plugin_a_state_dir_held_is_refused_and_nothing_is_bound(where: Path, port: int,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    held = statelock.acquire(str(where / "state"), "cri-resmgr relay")
    try:
        code, tasks = run_plugin(nri_settings(where, port), where)
        assert code == 1 and not tasks
        assert len(errors(caplog)) == 1 and "is in use by cri-resmgr relay" in errors(caplog)[0]
        assert_nothing_left(where, port, lock=False)
    finally:
        held.release()


def test_plugin_a_metrics_address_taken_releases_the_lock(where: Path, port: int,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        code, tasks = run_plugin(nri_settings(where, port), where)
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in errors(caplog)[0]
    assert_nothing_left(where, port)


def test_plugin_a_config_socket_taken_closes_the_metrics_port_and_releases_the_lock(
        where: Path, port: int, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(where / "config.sock"))
        other.listen()
        code, tasks = run_plugin(nri_settings(where, port), where)
        assert (where / "config.sock").exists()  # the other process's, left alone
    os.unlink(where / "config.sock")
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and errors(caplog)[0].startswith("cannot serve the Config service: ")
    assert_nothing_left(where, port)



def test_plugin_a_handed_over_connection_the_runtime_closed_undoes_its_start(
        where: Path, port: int, caplog: pytest.LogCaptureFixture) -> None:
    """The runtime that launched the plugin hung up before it registered: it exits 0, as
    after a Shutdown, with all of its start undone."""
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    ours, theirs = socket.socketpair()
    theirs.close()
    code, tasks = run_plugin(nri_settings(where, port, host_root="/"), where, handed_fd=ours.detach())
    assert code == 0 and not tasks, errors(caplog)
    assert "the runtime closed the connection it handed over: exiting" in caplog.text
    assert "shutting down" in caplog.text
    assert_nothing_left(where, port)


def test_plugin_a_handed_over_fd_that_is_no_socket_fails_and_undoes_its_start(
        where: Path, port: int, caplog: pytest.LogCaptureFixture) -> None:
    fd = os.open(where, os.O_RDONLY)  # a directory: no connection can be made of it
    try:
        code, tasks = run_plugin(nri_settings(where, port, host_root="/"), where, handed_fd=fd)
    finally:
        with contextlib.suppress(OSError):  # the plugin's socket object may have closed it
            os.close(fd)
    assert code == 1 and not tasks
    assert len(errors(caplog)) == 1 and "cannot use the socket the runtime handed over" in errors(caplog)[0]
    assert_nothing_left(where, port)


def test_plugin_launched_on_a_host_root_it_cannot_read_is_one_error_line(
        where: Path, port: int, caplog: pytest.LogCaptureFixture) -> None:
    """A launched plugin (its configuration comes with Configure) discovers the topology before
    it registers; the command line checks no host root under the none policy, so a bad one is
    met here: one error line and exit 1, not a traceback, and the start undone."""
    ours, theirs = socket.socketpair()
    try:
        code, tasks = run_plugin(nri_settings(where, port, host_root=str(where / "nowhere")), where,
                                 handed_fd=ours.fileno())
    finally:
        ours.close()
        theirs.close()
    assert code == 1 and not tasks
    assert errors(caplog) == [f"host root {str(where / 'nowhere')!r} is not a readable directory"]
    assert_nothing_left(where, port)


def test_plugin_stopped_by_sigterm_undoes_the_same(where: Path, port: int, caplog: pytest.LogCaptureFixture) -> None:
    """No runtime on the NRI socket: the plugin keeps dialling until SIGTERM stops it."""
    caplog.set_level(logging.INFO, logger="cri_resmgr")

    async def scenario() -> tuple[int, set[asyncio.Task[Any]]]:
        was = handlers()
        nri = nri_app.NriSettings(socket=str(where / "nri.sock"))
        task = asyncio.ensure_future(nri_app.run(nri_settings(where, port), nri, default_registry()))
        for _ in range(600):  # the signal handler is in place before the Config service serves
            if (where / "config.sock").exists() or task.done():
                break
            await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        code = await asyncio.wait_for(task, 60)
        assert handlers() == was
        await asyncio.sleep(0)
        return code, asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    code, tasks = asyncio.run(scenario())
    assert code == 0 and not tasks, errors(caplog)
    assert "shutting down" in caplog.text and not errors(caplog)
    assert_nothing_left(where, port)
