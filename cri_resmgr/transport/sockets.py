"""Unix socket hygiene for the sockets cri-resmgr serves on."""

from __future__ import annotations

import contextlib
import errno
import logging
import os

# Shared with the Config service and the agent, which may not import the transport.
from cri_resmgr.unixsocket import DIR_MODE, SocketError, is_live, prepare

__all__ = ["DIR_MODE", "SOCKET_MODE", "SocketError", "is_live", "prepare", "remove", "secure", "strip_scheme"]

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


def strip_scheme(address: str) -> str:
    """Accept both '/path' and 'unix:///path' (kubelet's endpoint form)."""
    if address.startswith("unix://"):
        return address[len("unix://"):]
    if address.startswith("unix:"):
        return address[len("unix:"):]
    return address


def secure(path: str, like: str | None = None, mode: int = SOCKET_MODE) -> None:
    """Set the served socket's mode, and its owner and group to those of `like`.

    Matching the runtime socket's ownership means whoever may talk to the
    runtime may talk to the relay, and nobody else.
    """
    os.chmod(path, mode)
    if like:
        try:
            st = os.stat(like)
        except OSError as e:
            log.warning("cannot stat %s to copy its ownership: %s", like, e)
            return
        try:
            os.chown(path, st.st_uid, st.st_gid)
        except OSError as e:
            if e.errno != errno.EPERM:
                raise
            log.warning("cannot give %s the owner of %s: %s", path, like, e)


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
