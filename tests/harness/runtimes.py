"""The newer containerd releases the tests run besides the system's 1.6: Debian's
packages unpacked by scripts/fetch-runtimes.sh (`make deps`) into a cache outside
the repository, one directory per version. Nothing here downloads: a missing
release is a skip, or a failure under CI=true (a skip there would hide a broken
`make deps`)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE = Path(os.environ.get("CRI_RESMGR_RUNTIME_CACHE", "/var/cache/cri-resmgr-test"))
# The releases the tests speak of; scripts/fetch-runtimes.sh fetches the same ones.
CONTAINERD_17 = "1.7.24"  # Debian trixie: NRI v0.6, off by default
CONTAINERD_2 = "2.1.9"  # Debian sid: NRI on by default, CRI v1 only


def containerd_bin_dir(version: str) -> Path | None:
    """The unpacked release's usr/bin (containerd, ctr, containerd-shim-runc-v2), or None."""
    root = CACHE / f"containerd-{version}"
    bin_dir = root / "usr" / "bin"
    if (root / ".complete").exists() and all(os.access(bin_dir / b, os.X_OK)
                                              for b in ("containerd", "ctr", "containerd-shim-runc-v2")):
        return bin_dir
    return None


def missing_reason(version: str) -> str | None:
    """Why containerd `version` cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root to run containerd"
    if containerd_bin_dir(version) is None:
        return (f"containerd {version} is not unpacked under {CACHE} "
                "(make deps, i.e. scripts/fetch-runtimes.sh, fetches it)")
    return None


def major(version: str) -> int:
    return int(version.split(".", 1)[0])
