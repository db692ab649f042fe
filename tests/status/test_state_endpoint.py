"""/state on the metrics address: the engine's snapshot taken on the relay's event loop,
served as JSON; `cri-resmgr status` reading it."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from cri_resmgr import __version__
from cri_resmgr.engine.snapshot import EngineState
from cri_resmgr.frontend import health
from cri_resmgr.status import endpoint
from tests.status.statekit import engine_state


class _FakeEngine:
    """Counts the snapshots and checks they are taken on the loop's thread."""

    def __init__(self, state: EngineState, loop_thread: threading.Thread) -> None:
        self._state = state
        self._loop_thread = loop_thread
        self.calls = 0

    def state(self) -> EngineState:
        assert threading.current_thread() is self._loop_thread
        self.calls += 1
        return self._state

    async def current_state(self) -> EngineState:
        return self.state()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def relay_like():
    """The relay's wiring in app.py: the HTTP server on threads, the engine on a loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    engine = _FakeEngine(engine_state(), thread)
    port = _free_port()
    server = health.serve(f"127.0.0.1:{port}", CollectorRegistry(), lambda: None, endpoint.on_loop(engine, loop))
    yield port, engine, loop
    server.shutdown()
    server.server_close()
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_state_is_the_snapshot_as_json(relay_like):
    port, engine, _ = relay_like
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5) as r:
        assert r.status == 200 and r.headers["Content-Type"] == "application/json"
        doc = json.load(r)
    stamp = {k: doc.pop(k) for k in ("node", "taken_at", "relay_version")}  # which node, when, which build
    assert doc == engine_state().to_document()
    assert stamp["node"] and stamp["relay_version"] == __version__ and abs(stamp["taken_at"] - time.time()) < 600
    assert engine.calls == 1


def test_state_when_the_loop_is_gone_is_503(relay_like):
    port, _, loop = relay_like
    loop.call_soon_threadsafe(loop.stop)
    while loop.is_running():
        pass
    loop.close()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=10)
    assert e.value.code == 503 and "shutting down" in json.load(e.value)["error"]


def test_no_state_source_is_404():
    port = _free_port()
    server = health.serve(f"127.0.0.1:{port}", CollectorRegistry(), lambda: None)
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=5)
        assert e.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def _status(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cri_resmgr.cli", "status", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_status_command_text_json_and_svg_file(relay_like, tmp_path):
    port, _, _ = relay_like
    text = _status("-address", f":{port}")
    assert text.returncode == 0, text.stderr
    assert "CPU 6 postgres  CPU 7 postgres" in text.stdout and "\x1b[" not in text.stdout  # not a TTY
    raw = _status("-address", f"127.0.0.1:{port}", "-o", "json")
    saved = json.loads(raw.stdout)
    assert {k: v for k, v in saved.items() if k not in ("node", "taken_at", "relay_version")} == \
        engine_state().to_document()
    out = tmp_path / "node.svg"
    svg = _status("-o", "svg", str(out), "-address", f":{port}")
    assert svg.returncode == 0 and svg.stdout == "" and out.read_text().startswith("<svg ")
    # A saved /state drawn without a server: the same picture, node and version in the corner.
    (tmp_path / "state.json").write_text(raw.stdout)
    again = _status("-state", str(tmp_path / "state.json"), "-address", f":{_free_port()}")
    assert again.returncode == 0, again.stderr
    assert again.stdout.replace(_stamp_line(again.stdout), "") == text.stdout.replace(_stamp_line(text.stdout), "")
    assert f"cri-resmgr {__version__}" in _stamp_line(again.stdout) and "UTC" in _stamp_line(again.stdout)
    drawn = _status("-state", str(tmp_path / "state.json"), "-o", "svg")
    assert drawn.returncode == 0 and f"cri-resmgr {__version__}" in drawn.stdout and 'text-anchor="end"' in drawn.stdout


def _stamp_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("(node "))


def test_status_of_a_saved_file_that_is_not_one_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    bad = _status("-state", str(tmp_path / "x.json"))
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "x.json is not JSON" in bad.stderr
    missing = _status("-state", str(tmp_path / "none.json"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr and "none.json" in missing.stderr
    (tmp_path / "list.json").write_text("[]")
    assert "not a cri-resmgr state document" in _status("-state", str(tmp_path / "list.json")).stderr


def test_status_command_errors_are_one_line():
    port = _free_port()
    gone = _status("-address", f":{port}")
    assert gone.returncode == 1 and gone.stderr.startswith("cri-resmgr status: error: no state from :")
    assert len(gone.stderr.splitlines()) == 1
    bad = _status("-address", "nowhere")
    assert bad.returncode == 2 and "invalid value for -address" in bad.stderr
    extra = _status("a.svg", "b.svg")
    assert extra.returncode == 2 and "unexpected extra argument (b.svg)" in extra.stderr


def test_a_saved_state_given_as_the_output_file_is_refused_not_overwritten(relay_like, tmp_path):
    """Issue 29: `status node.json` (a saved /state as the bare FILE, which is the output) says
    'did you mean -state node.json?' and leaves the file as it is, before asking any relay."""
    port, _, _ = relay_like
    saved = _status("-address", f":{port}", "-o", "json")
    assert saved.returncode == 0, saved.stderr
    for name in ("node.json", "node.state"):
        path = tmp_path / name
        path.write_text(saved.stdout)
        for args in ([str(path)], ["-o", "svg", str(path)], [str(path), "-address", f":{_free_port()}"]):
            refused = _status(*args)
            assert refused.returncode == 2 and refused.stderr == (
                f"cri-resmgr status: error: {path} is a saved /state: did you mean -state {path}? (FILE receives "
                "the output; it is left as it is)\n"), args
            assert path.read_text() == saved.stdout
    # -o json writes the document again (refreshing a saved state is what it is for); other JSON is overwritten.
    assert _status("-address", f":{port}", "-o", "json", str(path)).returncode == 0
    assert json.loads(path.read_text())["format"] == "cri-resmgr-state"
    other = tmp_path / "other.json"
    other.write_text('{"format": "something else"}')
    assert _status("-address", f":{port}", str(other)).returncode == 0 and "CPU 6 postgres" in other.read_text()
    # What help says about FILE and -state.
    helped = _status("-help").stdout
    assert helped.startswith("usage: cri-resmgr status [flags] [FILE]\n")
    assert "never the input: a saved /state is drawn with -state FILE" in " ".join(helped.split())
