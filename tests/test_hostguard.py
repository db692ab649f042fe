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
    r = _run(tmp_path, "    import os; (GUARDED / 'lock').write_text(f'cri-resmgr relay (pid {os.getpid()})\\n')")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 passed" in r.stdout  # the tests themselves pass: the run fails
    assert f"during test_inner.py::test_inner: changed {tmp_path / 'var-lib-cri-resmgr' / 'lock'}" in r.stdout


def test_a_run_that_leaves_them_alone_passes(tmp_path):
    r = _run(tmp_path, "    assert (GUARDED / 'lock').read_text() == '1\\n'")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "changed" not in r.stdout


def test_a_class_that_reaches_the_suites_own_process_fails_the_run_and_is_put_back(tmp_path):
    # What a scheduling class matched too widely did: the pytest process became SCHED_BATCH
    # and nice 6, and every test after it ran so.
    r = _run(tmp_path, "    import builtins, os\n"
                       "    builtins.START = os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)\n"
                       "    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)); os.nice(6)\n"
                       "\n\ndef test_after():\n    import builtins, os\n"
                       "    assert (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)) == builtins.START")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "3 passed" in r.stdout, r.stdout
    assert "during test_inner.py::test_inner: this pytest process's scheduling (policy, nice, ioprio) (" \
        in r.stdout and "-> (3, " in r.stdout, r.stdout


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


# A process outside the run: double-forked and setsid by the outer test, so not a descendant
# of the inner pytest. Told by trigger files, it takes the guarded state directory's lock
# (writing its pid as a relay does) and binds a config socket, then removes the socket, and
# says when each is done; it ends when told to stop (or when its deadline passes).
OUTSIDER = r"""
import os, socket, sys, time
guarded, control = sys.argv[1], sys.argv[2]
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
open(os.path.join(control, "pid"), "w").write(f"{os.getpid()}\n")
def wait(name):
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(control, name)):
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.02)
def done(name):
    open(os.path.join(control, name), "w").close()
wait("start")
with open(os.path.join(guarded, "lock"), "w") as f:
    f.write(f"cri-resmgr relay (pid {os.getpid()})\n")
open(os.path.join(guarded, "state.json"), "w").write("{}")
sock = socket.socket(socket.AF_UNIX)
sock.bind(os.path.join(guarded, "cri-resmgr-config.sock"))
sock.listen()
done("started")
wait("remove")
sock.close()
os.unlink(os.path.join(guarded, "cri-resmgr-config.sock"))
done("removed")
wait("stop")
"""

INNER_WAIT = """
import time
def tell_and_wait(control, tell, answer):
    (control / tell).touch()
    deadline = time.monotonic() + 60
    while not (control / answer).exists():
        assert time.monotonic() < deadline, f"no {answer} from the outside process"
        time.sleep(0.02)
"""


def _outsider(tmp_path: Path) -> tuple[Path, Path]:
    guarded = tmp_path / "var-lib-cri-resmgr"
    control = tmp_path / "control"
    control.mkdir()
    guarded.mkdir()
    subprocess.run([sys.executable, "-c", OUTSIDER, str(guarded), str(control)], check=True, timeout=30)
    return guarded, control


def _stop(control: Path) -> None:
    (control / "stop").touch()
    try:
        pid = int((control / "pid").read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, 15)  # it ends at "stop"; should it not have yet, by its PID
    except ProcessLookupError:
        pass


def _run_inner(tmp_path: Path, guarded: Path, control: Path, tests: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(
        f"from pathlib import Path\n{INNER_WAIT}\nGUARDED = Path({str(guarded)!r})\n"
        f"CONTROL = Path({str(control)!r})\n\n{tests}")
    env = dict(os.environ, CRIRM_HOSTGUARD_PATHS=str(guarded), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                           "-p", "tests.harness.hostguard", str(tmp_path / "test_inner.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


def test_a_process_outside_the_run_that_takes_the_lock_and_a_socket_does_not_fail_it(tmp_path):
    guarded, control = _outsider(tmp_path)
    try:
        r = _run_inner(tmp_path, guarded, control,
                       "def test_starts():\n    tell_and_wait(CONTROL, 'start', 'started')\n\n\n"
                       "def test_removes():\n    tell_and_wait(CONTROL, 'remove', 'removed')\n")
    finally:
        _stop(control)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout
    assert "changed by processes outside the run" in r.stdout
    lines = {line.split(": ", 1)[0]: line for line in r.stdout.splitlines() if line.startswith("during ")}
    assert f"created {guarded / 'cri-resmgr-config.sock'}" in lines["during test_inner.py::test_starts"], r.stdout
    assert f"created {guarded / 'lock'}" in lines["during test_inner.py::test_starts"], r.stdout
    assert f"removed {guarded / 'cri-resmgr-config.sock'}" in lines["during test_inner.py::test_removes"], r.stdout


def test_a_descendant_of_the_run_that_takes_the_lock_fails_it_beside_an_outsider(tmp_path):
    guarded, control = _outsider(tmp_path)
    descendant = ("import os, subprocess, sys\n"
                  "subprocess.run([sys.executable, '-c', 'import os; open(%r, \"w\").write("
                  "f\"cri-resmgr relay (pid {os.getpid()})\\\\n\")' % str(GUARDED / 'lock')], check=True)\n")
    try:
        r = _run_inner(tmp_path, guarded, control,
                       f"{descendant}\n\ndef test_outsider():\n    tell_and_wait(CONTROL, 'start', 'started')\n"
                       "    tell_and_wait(CONTROL, 'remove', 'removed')\n\n\n"
                       "def test_own():\n"
                       "    subprocess.run([sys.executable, '-c', 'import os; open(%r, \"w\").write("
                       "f\"cri-resmgr relay (pid {os.getpid()})\\\\n\")' % str(GUARDED / 'lock')], check=True)\n")
    finally:
        _stop(control)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 passed" in r.stdout
    failing = r.stdout.split("the run fails")[-1]
    assert f"during test_inner.py::test_own: changed {guarded / 'lock'}" in failing, r.stdout
    assert "during test_inner.py::test_outsider" not in failing, r.stdout
