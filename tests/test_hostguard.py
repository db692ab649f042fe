"""The suite's guard of the host's paths (tests/harness/hostguard.py): a run during which
they change fails, naming the test; one that leaves them alone passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    guarded = tmp_path / "var-lib-cri-resmgr"
    guarded.mkdir()
    (guarded / "lock").write_text("1\n")
    (tmp_path / "test_inner.py").write_text(
        f"from pathlib import Path\n\nGUARDED = Path({str(guarded)!r})\n\n\n"
        f"def test_other():\n    pass\n\n\ndef test_inner():\n{body}\n")
    env = dict(os.environ, CRIRM_HOSTGUARD_PATHS=str(guarded), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                           "-p", "tests.harness.hostguard", str(tmp_path / "test_inner.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_changed_lock_fails_the_run_naming_the_test(tmp_path):
    r = _run(tmp_path, "    (GUARDED / 'lock').write_text('cri-resmgr relay (pid 1)\\n')")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 passed" in r.stdout  # the tests themselves pass: the run fails
    assert f"during test_inner.py::test_inner: changed {tmp_path / 'var-lib-cri-resmgr' / 'lock'}" in r.stdout


def test_a_run_that_leaves_them_alone_passes(tmp_path):
    r = _run(tmp_path, "    assert (GUARDED / 'lock').read_text() == '1\\n'")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "changed" not in r.stdout


def test_an_installed_venv_is_watched_by_its_directory_not_walked(tmp_path, monkeypatch):
    from tests.harness import hostguard

    root = tmp_path / "opt-cri-resmgr"
    (root / "venv-1" / "lib").mkdir(parents=True)
    (root / "venv-1" / "lib" / "module.py").write_text("")
    (root / "installed-files").write_text("")
    monkeypatch.setattr(hostguard, "GUARDED", (str(root),))
    monkeypatch.setattr(hostguard, "GUARDED_GLOBS", ())
    before = hostguard.snapshot()
    assert str(root / "installed-files") in before and str(root / "venv-1") in before
    assert str(root / "venv-1" / "lib") not in before
    (root / "venv-2").mkdir()
    assert f"created {root / 'venv-2'}" in hostguard.changes(before, hostguard.snapshot())
