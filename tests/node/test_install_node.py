"""scripts/install-node.sh into a throwaway root (ROOT=, as if it were /), from a wheel built
here: the relay-only venv, the links, the unit and the sample files, an upgrade that adds the
agent, and an uninstall that leaves the root exactly as it was, the operator's files included."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cri_resmgr import __version__

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install-node.sh"
OPERATOR_DEFAULTS = 'CRI_RESMGR_OPTIONS="-policy static"\n'


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built with the installed setuptools from a copy of the sources (the checkout stays clean)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("cri_resmgr", "agent", "webhook"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", build, str(out)], cwd=src, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root: a file's digest, a link's target, 'dir'."""
    seen = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            seen[key] = "-> " + os.readlink(path)
        elif path.is_dir():
            seen[key] = "dir"
        else:
            seen[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def run(root: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROOT": str(root), "PYTHON": shutil.which("python3") or "python3"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done


def venv_has(root: Path, module: str) -> bool:
    python = root / "opt/cri-resmgr/current/bin/python"
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([str(python), "-c", probe], timeout=60).returncode == 0


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A node that has an operator's /etc/default/cri-resmgr and another program in /usr/local/bin."""
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/cri-resmgr").write_text(OPERATOR_DEFAULTS)
    (tmp_path / "usr/local/bin").mkdir(parents=True)
    (tmp_path / "usr/local/bin/kubectl").write_text("#!/bin/sh\n")
    yield tmp_path
    # Venvs are some 100 MB each: not left for pytest's keep-the-last-three clean-up.
    shutil.rmtree(tmp_path / "opt", ignore_errors=True)


def test_install_upgrade_uninstall(root, wheel):
    before = snapshot(root)
    run(root, "--from", str(wheel))
    bin_dir = root / "usr/local/bin"
    # The relay alone: neither the agent's client nor the protobuf generator.
    assert venv_has(root, "grpc") and venv_has(root, "yaml")
    assert not venv_has(root, "kubernetes") and not venv_has(root, "grpc_tools")
    shown = subprocess.run([str(bin_dir / "cri-resmgr"), "--version"], capture_output=True, text=True, timeout=60)
    assert shown.stdout.startswith(f"cri-resmgr {__version__} (commit "), shown.stderr
    assert sorted(p.name for p in bin_dir.iterdir()) == ["cri-resmgr", "kubectl"]
    # The unit names files that are there; the operator's defaults are untouched.
    unit = (root / "etc/systemd/system/cri-resmgr.service").read_text()
    assert "ExecStart=/usr/local/bin/cri-resmgr -fallback-config /etc/cri-resmgr/fallback.yaml" in unit
    assert (root / "etc/default/cri-resmgr").read_text() == OPERATOR_DEFAULTS
    # Documentation= names this project's docs, installed with the venv (issue 38: the original project's).
    docs = [word.removeprefix("file:") for line in unit.splitlines() if line.startswith("Documentation=")
            for word in line.split("=", 1)[1].split()]
    assert docs and all((root / doc.lstrip("/")).is_file() for doc in docs), docs
    fallback = root / "etc/cri-resmgr/fallback.yaml"
    assert fallback.read_text() == (REPO / "scripts/node/fallback.yaml").read_text()
    checked = subprocess.run([str(bin_dir / "cri-resmgr"), "-fallback-config", str(fallback), "-print-config"],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr

    # An upgrade that adds the agent: a new venv, the old one kept for the running relay.
    fallback.write_text(fallback.read_text() + "# the operator's note\n")
    first_venv = os.readlink(root / "opt/cri-resmgr/current")
    run(root, "--agent", "--webhook", "--nri", "--from", str(wheel))
    assert os.readlink(root / "opt/cri-resmgr/current") != first_venv
    assert (root / "opt/cri-resmgr" / first_venv).is_dir()
    assert venv_has(root, "kubernetes") and not venv_has(root, "grpc_tools")
    for command in ("cri-resmgr-agent", "cri-resmgr-webhook", "cri-resmgr-nri"):
        shown = subprocess.run([str(bin_dir / command), "-version"], capture_output=True, text=True, timeout=60)
        assert shown.stdout.startswith(f"{command} {__version__} (commit "), shown.stderr
    # --nri: the plugin's unit and defaults, naming what is there (issue 23: ExecStart failed before).
    nri_unit = (root / "etc/systemd/system/cri-resmgr-nri.service").read_text()
    assert "ExecStart=/usr/local/bin/cri-resmgr-nri -fallback-config /etc/cri-resmgr/fallback.yaml" in nri_unit
    assert "EnvironmentFile=-/etc/default/cri-resmgr-nri" in nri_unit
    nri_defaults = root / "etc/default/cri-resmgr-nri"
    assert nri_defaults.read_text() == (REPO / "scripts/node/cri-resmgr-nri.default").read_text()
    options = next(line.split("=", 1)[1].strip('"') for line in nri_defaults.read_text().splitlines()
                   if line.startswith("CRI_RESMGR_NRI_OPTIONS="))
    checked = subprocess.run([str(bin_dir / "cri-resmgr-nri"), "-fallback-config", str(fallback), *options.split(),
                              "-print-config"], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert fallback.read_text().endswith("# the operator's note\n")

    # Uninstall: everything install added goes, but a configuration the operator changed stays.
    done = run(root, "uninstall")
    assert "kept /etc/cri-resmgr/fallback.yaml" in done.stdout
    fallback.unlink()
    (root / "etc/cri-resmgr").rmdir()
    assert snapshot(root) == before


def test_a_command_that_is_not_ours_stops_the_install_before_anything_is_built(root, wheel):
    (root / "usr/local/bin/cri-resmgr").write_text("#!/bin/sh\necho someone else's\n")
    before = snapshot(root)
    done = run(root, "--from", str(wheel), ok=False)
    assert "/usr/local/bin/cri-resmgr exists and was not installed by this script" in done.stderr
    assert snapshot(root) == before


def test_uninstall_without_install(root):
    done = run(root, "uninstall", ok=False)
    assert "nothing to uninstall" in done.stderr


def run_without_root(base: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """The script with ROOT unset, as an operator runs it, in a mount namespace of its own where / is
    read-only and only `base` is writable: the install's directories (PREFIX, BINDIR, SYSCONFDIR,
    UNITDIR) are under `base`, and a path the script did not mean to touch fails instead of changing
    the host."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "ROOT")}
    env.update(PYTHON=shutil.which("python3") or "python3", TMPDIR=str(base / "tmp"),
               PREFIX=str(base / "opt/cri-resmgr"), BINDIR=str(base / "usr/local/bin"),
               SYSCONFDIR=str(base / "etc"), UNITDIR=str(base / "etc/systemd/system"))
    (base / "tmp").mkdir(exist_ok=True)
    fenced = 'mount --bind "$1" "$1" && mount -o remount,bind,ro / && shift && exec bash "$@"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", fenced, "sh", str(base),
                           str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)
    assert (done.returncode == 0) == ok, done.stdout + done.stderr
    return done


def _can_fence(base: Path) -> bool:
    if shutil.which("unshare") is None or shutil.which("chattr") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind "$1" "$1" && mount -o remount,bind,ro /', "sh", str(base)],
                           capture_output=True, timeout=60)
    return probe.returncode == 0


def test_uninstall_with_root_unset_after_a_real_install_and_after_a_failed_one(tmp_path, wheel):
    """ROOT unset, as on a node (the tests above always set it): `${ROOT:?}` made every such
    uninstall fail after the manifest was gone, orphaning the venv and /etc/cri-resmgr. A removal
    that fails (an immutable file) leaves what is left listed, and a second run finishes the job."""
    if not _can_fence(tmp_path):
        pytest.skip("needs root, unshare(1) and chattr(1) to run the script where it cannot change /")
    base = tmp_path / "node"
    (base / "etc/default").mkdir(parents=True)
    before = snapshot(base)
    try:
        run_without_root(base, "--from", str(wheel))
        assert (base / "usr/local/bin/cri-resmgr").is_symlink()
        assert (base / "etc/cri-resmgr/fallback.yaml").is_file()
        stuck = base / "etc/cri-resmgr/fallback.yaml"
        subprocess.run(["chattr", "+i", str(stuck)], check=True)
        try:
            done = run_without_root(base, "uninstall", ok=False)
        finally:
            subprocess.run(["chattr", "-i", str(stuck)], check=True)
        assert "could not remove 1 of the installed paths" in done.stderr, done.stderr
        # Everything else went; the manifest lists what is left.
        assert not (base / "opt/cri-resmgr/current").exists()
        assert not list((base / "opt/cri-resmgr").glob("venv-*"))
        left = (base / "opt/cri-resmgr/installed-files").read_text()
        assert "/etc/cri-resmgr/fallback.yaml " in left and "venv-" not in left
        done = run_without_root(base, "uninstall")
        assert "removed cri-resmgr" in done.stdout
        (base / "tmp").rmdir()
        assert snapshot(base) == before
        run_without_root(base, "uninstall", ok=False)
    finally:
        shutil.rmtree(base / "opt", ignore_errors=True)
