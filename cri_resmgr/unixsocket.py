"""Preparing a unix socket path to serve on: its directory made, a stale socket replaced, a
live one refused. Standard library only, below every layer (like errors.py): the relay's
sockets (transport/sockets.py), the Config service and the agent's Agent service share it,
so none of them takes over a socket another process serves on."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat

from cri_resmgr.errors import CriResmgrError

log = logging.getLogger(__name__)

DIR_MODE = 0o711  # others may reach the socket but not list the directory


class SocketError(CriResmgrError):
    """A socket path cannot be used; the message says why and names the path."""


def is_live(path: str, timeout: float = 1.0) -> bool:
    """True if something accepts connections on the unix socket at path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def prepare(path: str, what: str = "relay") -> None:
    """Make path ready to bind: create its directory, replace a stale socket.

    A live socket (another process answering) is an error rather than being
    stolen: two relays on one socket would split kubelet's calls between them.
    """
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
            os.chmod(directory, DIR_MODE)  # makedirs' mode is filtered by umask
        except OSError as e:  # under /proc, a file in the way, a read-only mount
            raise SocketError(f"{what} socket {path}: cannot create its directory {directory}: "
                              f"{(e.strerror or str(e)).lower()}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketError(f"{what} socket {path} exists and is not a socket; refusing to replace it")
    if is_live(path):
        raise SocketError(f"{what} socket {path} is in use: another instance is already running")
    log.info("removing stale %s socket %s", what, path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


