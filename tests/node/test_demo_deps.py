"""`make demo` installs only what the demo runs (issue 29): `scripts/install-deps.sh demo` into
a fresh venv gives the relay's run-time packages, and the demo imports with nothing else:
no pytest, mypy, ruff, kubernetes client or protobuf generator."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEV_ONLY = ("pytest", "mypy", "ruff", "kubernetes", "grpc_tools", "importlinter")


def test_the_demo_mode_installs_less_and_the_demo_imports_with_it(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(VENV=str(venv), PYTHON=shutil.which("python3") or "python3")
    done = subprocess.run(["bash", str(REPO / "scripts/install-deps.sh"), "demo"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    probe = ("import importlib.util, sys; "
             f"print(' '.join(m for m in {DEV_ONLY!r} if importlib.util.find_spec(m)))")
    present = subprocess.run([str(venv / "bin/python"), "-c", probe], capture_output=True, text=True, timeout=60)
    assert present.returncode == 0 and present.stdout.strip() == "", present.stdout + present.stderr
    imported = subprocess.run([str(venv / "bin/python"), "-c", "import tests.harness.demo, uvloop, grpc"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
    # Run again: nothing to do (the stamp), and an unknown mode is refused.
    again = subprocess.run(["bash", str(REPO / "scripts/install-deps.sh"), "demo"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    bad = subprocess.run(["bash", str(REPO / "scripts/install-deps.sh"), "everything"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown mode 'everything'" in bad.stderr


def test_make_demo_asks_for_the_demo_mode() -> None:
    plan = subprocess.run(["make", "-n", "demo"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert "install-deps.sh demo" in plan.stdout
