"""Unix socket hygiene for the sockets cri-resmgr serves on."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat

from cri_resmgr.errors import CriResmgrError

log = logging.getLogger(__name__)

DIR_MODE = 0o711
SOCKET_MODE = 0o660


class SocketError(CriResmgrError):
    """A socket path cannot be used; the message says why and names the path."""


def strip_scheme(address: str) -> str:
    """Accept both '/path' and 'unix:///path' (kubelet's endpoint form)."""
    if address.startswith("unix://"):
        return address[len("unix://"):]
    if address.startswith("unix:"):
        return address[len("unix:"):]
    return address


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
        os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
        os.chmod(directory, DIR_MODE)  # makedirs' mode is filtered by umask
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
