"""/healthz, /readyz and /metrics on the metrics address; anything else is 404; -probe."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from cri_resmgr.frontend import health


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def served():
    state: dict[str, str | None] = {"why": "no configuration in force yet"}
    port = _free_port()
    server = health.serve(f":{port}", CollectorRegistry(), lambda: state["why"])  # ':PORT' is 127.0.0.1
    yield port, state
    server.shutdown()
    server.server_close()


def test_paths_and_probe(served):
    port, state = served
    base = f"http://127.0.0.1:{port}"
    assert _get(base + "/healthz") == (200, "ok\n")
    assert _get(base + "/readyz") == (503, "no configuration in force yet\n")
    assert health.probe(f"127.0.0.1:{port}") == (False, "no configuration in force yet")
    state["why"] = None
    assert _get(base + "/readyz") == (200, "ready\n")
    assert health.probe(f":{port}") == (True, "ready")
    assert _get(base + "/metrics")[0] == 200
    for other in ("/", "/metrics/x", "/healthzz", "/favicon.ico"):
        assert _get(base + other)[0] == 404, other


def test_probe_of_nothing_listening_is_not_ready():
    ready, why = health.probe(f"127.0.0.1:{_free_port()}", timeout=2)
    assert not ready and "relay not reachable" in why
