"""sd_notify(3) without libsystemd: tells systemd (Type=notify) when the relay serves and when it stops.

systemd passes the address of its notification socket in NOTIFY_SOCKET: a path, or an
abstract-namespace name written with a leading '@'. A message is one datagram of
newline-separated VAR=VALUE lines (`READY=1`, `STOPPING=1`, `STATUS=...`). Outside systemd
NOTIFY_SOCKET is unset and notify() does nothing. Standard library only, and no failure
here stops the relay: systemd's start timeout is the judge of a lost READY=1.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

# The name its lines carried before it moved: log filters and -logger-debug (logsetup.SOURCES) match it.
log = logging.getLogger("cri_resmgr.sdnotify")

ENV = "NOTIFY_SOCKET"


def address(value: str) -> str | None:
    """The socket address for connect(): '@name' is the abstract name '\\0name'; None for
    what a unix datagram socket cannot reach (empty, relative, or 'vsock:...')."""
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def notify(*lines: str, environ: Mapping[str, str] | None = None) -> bool:
    """Sends the lines as one message; True when a notification socket took it."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    if not value:
        return False
    target = address(value)
    if target is None:
        log.warning("%s=%r is not a unix socket address; not notifying systemd", ENV, value)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall("\n".join(lines).encode())
    except OSError as e:
        log.warning("cannot notify systemd at %s: %s", value, e)
        return False
    return True
