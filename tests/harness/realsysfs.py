"""The real-machine sysfs dumps kept beside the repository (never inside it; read
/work/shared/fixtures/sysfs/NOTICE.md): where they are from the main checkout or a
worktree, and their trees unpacked with only the files discovery reads."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["FIXTURES", "TREES", "unpack"]

_REPO = Path(__file__).resolve().parents[2]
# /work/main/../shared or /work/wt/NAME/../../shared.
FIXTURES = next((p for p in (_REPO.parent / "shared" / "fixtures" / "sysfs",
                             _REPO.parent.parent / "shared" / "fixtures" / "sysfs") if p.is_dir()),
                _REPO.parent / "shared" / "fixtures" / "sysfs")
TREES = {
    "xeon-2socket-4numa-80cpu.tar.bz2": ("sysfs/2-socket-4-node-40-core",),
    "xeon-desktop-server-4socket.tar.bz2": ("sysfs/desktop", "sysfs/server", "sysfs/4-socket-server-nosnc"),
}
_SYS = "sys/devices/system"
_WANTED = [f"sysfs/*/{_SYS}/cpu/{name}" for name in (
    "online", "offline", "present", "isolated", "nohz_full", "cpu*/online", "cpu*/topology/*",
    "cpu*/cache/index*/level", "cpu*/cache/index*/type", "cpu*/cache/index*/shared_cpu_list",
    "cpu*/cache/index*/shared_cpu_map", "cpu*/cache/index*/size",
)] + [f"sysfs/*/{_SYS}/node/{name}" for name in ("online", "possible", "node*/cpulist", "node*/cpumap",
                                                 "node*/distance", "node*/meminfo")]


def unpack(archive: str, dest: Path) -> Path | None:
    """The archive's trees under `dest` (dest/sysfs/NAME); None when the dumps or tar are absent."""
    path = FIXTURES / archive
    if not path.is_file() or shutil.which("tar") is None:
        return None
    subprocess.run(["tar", "-xjf", str(path), "-C", str(dest), "-m", "--no-same-owner", "--no-same-permissions",
                    "--wildcards", "--no-wildcards-match-slash", *_WANTED], check=True)
    return dest
