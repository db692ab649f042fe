"""The test suite must not touch the host's cri-resmgr: a test that creates, changes or
removes anything under the paths a node install and a relay with default flags use
(state directory and its lock, sockets, configuration, the installed tree and units)
fails in its teardown, naming the paths.

A relay or plugin a test starts takes `-state-dir`, `-relay-socket` and the like under
the test's own directory; the default paths are the node's. Checking costs a few stat()
calls per test (these paths are missing or small on a test machine). Another process on
the machine touching them at the same time is reported too: the message says so.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pytest

# The defaults of cri_resmgr/config/settings.py and scripts/install-node.sh.
GUARDED = ("/var/lib/cri-resmgr", "/run/cri-resmgr", "/etc/cri-resmgr", "/opt/cri-resmgr")
GUARDED_GLOBS = ("/etc/systemd/system/cri-resmgr*",)

Snapshot = dict[str, tuple[int, int, int]]  # path -> (inode, mtime_ns, size)


def snapshot() -> Snapshot:
    out: Snapshot = {}
    roots = list(GUARDED) + [p for g in GUARDED_GLOBS for p in glob.glob(g)]
    for root in roots:
        _add(out, root)
        if os.path.isdir(root) and not os.path.islink(root):
            for top, dirs, files in os.walk(root):
                for name in dirs + files:
                    _add(out, os.path.join(top, name))
    return out


def _add(out: Snapshot, path: str) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        return
    out[path] = (st.st_ino, st.st_mtime_ns, st.st_size)


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    made = [f"created {p}" for p in sorted(after.keys() - before.keys())]
    gone = [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    changed = [f"changed {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return made + changed + gone


@pytest.fixture(autouse=True)
def _host_untouched() -> Iterator[None]:
    before = snapshot()
    yield
    found = changes(before, snapshot())
    if found:
        pytest.fail("the host's cri-resmgr paths changed during this test (give the relay -state-dir and "
                    "sockets of the test's own; or another process on the machine did it): " + "; ".join(found),
                    pytrace=False)
