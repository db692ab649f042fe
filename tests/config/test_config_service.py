"""The relay-side Config service (cri_resmgr.config.service) through the agent's client."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys

import pytest

from cri_resmgr.config.service import ConfigServer
from cri_resmgr_agent.relay_client import RelayConfigClient, RelayUnavailable


class AsyncApplier:
    """An applier whose apply is a coroutine, as the relay's may be."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.config = {"policy": "Active: builtin\n"}
        self.calls = []
        self._fail_with = fail_with

    async def apply(self, data, source):
        self.calls.append((dict(data), source))
        await asyncio.sleep(0)
        if self._fail_with:
            raise self._fail_with
        if "reject-me" in data:
            return "module reject-me is not wanted"
        self.config = dict(data)
        return None

    def current(self):
        return dict(self.config)


def serve(relay_like, applier, path):
    server = ConfigServer(applier, path)
    relay_like._run(server.start())
    return server


def test_accepts_rejects_and_reports_config_in_force(relay, sockdir):
    client = RelayConfigClient(relay.socket_path)
    assert client.set_config("node1", {"policy": "Active: a\n"}, "test source", "42") is None
    assert client.get_config() == {"policy": "Active: a\n"}
    error = client.set_config("node1", {"bogus": "x"}, "test source")
    assert error == 'unknown configuration module "bogus"'
    assert client.get_config() == {"policy": "Active: a\n"}, "the accepted configuration stays in force"
    assert relay.applier.sources == ["test source"]
    client.close()


def test_socket_and_directory_modes(sockdir, relay):
    nested = os.path.join(sockdir, "run", "cri-resmgr", "config.sock")
    server = serve(relay, relay.applier, nested)
    try:
        assert stat.S_IMODE(os.stat(nested).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(nested)).st_mode) == 0o711
        assert stat.S_ISSOCK(os.stat(nested).st_mode)
    finally:
        relay._run(server.stop(0))
    assert not os.path.exists(nested)


def test_async_applier_and_source_fallback(relay, sockdir):
    applier = AsyncApplier()
    path = os.path.join(sockdir, "async.sock")
    server = serve(relay, applier, path)
    try:
        client = RelayConfigClient(path)
        assert client.set_config("node7", {"reject-me": ""}, "") == "module reject-me is not wanted"
        assert applier.calls[-1][1] == "agent of node node7"
        assert client.get_config() == {"policy": "Active: builtin\n"}
        client.close()
    finally:
        relay._run(server.stop(0))


def test_applier_crash_is_answered_as_a_rejection(relay, sockdir):
    path = os.path.join(sockdir, "crash.sock")
    server = serve(relay, AsyncApplier(fail_with=KeyError("cpu")), path)
    try:
        error = RelayConfigClient(path).set_config("node1", {"policy": ""}, "x")
        assert error.startswith("internal error applying configuration") and "cpu" in error
    finally:
        relay._run(server.stop(0))


def test_no_relay_is_relay_unavailable(sockdir):
    with pytest.raises(RelayUnavailable, match="no config socket"):
        RelayConfigClient(os.path.join(sockdir, "none.sock")).set_config("n", {}, "s")


def test_a_live_config_socket_is_refused_not_taken_over(relay, sockdir):
    """Issue 29: a second relay with the same -config-socket deleted the first one's socket and
    bound its own (and removed it again on exit), leaving the first without its Config service."""
    from cri_resmgr.unixsocket import SocketError

    second = ConfigServer(AsyncApplier(), relay.socket_path)
    with pytest.raises(SocketError, match=f"config socket {relay.socket_path} is in use"):
        relay._run(second.start())
    relay._run(second.stop(0))  # never bound: removes nothing
    client = RelayConfigClient(relay.socket_path)
    try:
        assert client.get_config() == relay.applier.current()
    finally:
        client.close()


def test_a_second_relay_process_exits_1_and_leaves_the_live_config_socket_alone(relay, sockdir):
    done = subprocess.run(
        [sys.executable, "-m", "cri_resmgr.cli", "-config-socket", relay.socket_path,
         "-relay-socket", os.path.join(sockdir, "b-relay.sock"), "-state-dir", os.path.join(sockdir, "b-state"),
         "-runtime-socket", os.path.join(sockdir, "no-runtime.sock"), "-runtime-wait-timeout", "1",
         "-agent-socket", "-"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"config socket {relay.socket_path} is in use" in errors[0], done.stderr
    assert "waiting" not in done.stderr  # refused before waiting for the runtime
    client = RelayConfigClient(relay.socket_path)
    try:
        assert client.get_config() == relay.applier.current()
    finally:
        client.close()


def test_a_stale_config_socket_is_replaced(relay, sockdir):
    import socket as socketlib

    path = os.path.join(sockdir, "stale.sock")
    dead = socketlib.socket(socketlib.AF_UNIX)
    dead.bind(path)
    dead.close()  # the file stays, nobody listens: a crashed relay's
    server = serve(relay, AsyncApplier(), path)
    try:
        client = RelayConfigClient(path)
        assert client.get_config() == {"policy": "Active: builtin\n"}
        client.close()
    finally:
        relay._run(server.stop(0))
