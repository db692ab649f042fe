"""sd_notify without libsystemd: path and abstract-namespace sockets, and every way it must not fail."""

from __future__ import annotations

import secrets
import socket

from cri_resmgr.frontend import sdnotify


def test_path_socket(sockdir):
    path = f"{sockdir}/notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        assert sdnotify.notify("READY=1", "STATUS=serving", environ={"NOTIFY_SOCKET": path})
        assert server.recv(4096) == b"READY=1\nSTATUS=serving"


def test_abstract_socket():
    name = f"crirm-sdn-{secrets.token_hex(6)}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        assert sdnotify.notify("STOPPING=1", environ={"NOTIFY_SOCKET": "@" + name})
        assert server.recv(4096) == b"STOPPING=1"


def test_without_systemd_nothing_happens():
    assert not sdnotify.notify("READY=1", environ={})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": ""})


def test_unusable_addresses_are_warnings_not_errors(sockdir, caplog):
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": f"{sockdir}/nobody-listens"})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": "@"})
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 3


def test_address_forms():
    assert sdnotify.address("/run/systemd/notify") == "/run/systemd/notify"
    assert sdnotify.address("@name") == "\0name"
    assert sdnotify.address("relative") is None
