"""Readiness: is the configuration the cluster asks for in force on the relay?

Ready only once the relay accepted the selected configuration; not ready while
it is rejected, undelivered, or not yet known. Served over HTTP (/readyz,
/healthz) for probes, and checked by `cri-resmgr-agent -probe`.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Readiness:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._reason = "waiting for the node and its configuration from the API server"

    def set(self, ready: bool, reason: str) -> None:
        with self._lock:
            self._ready, self._reason = ready, reason

    def get(self) -> tuple[bool, str]:
        with self._lock:
            return self._ready, self._reason


class HealthServer:
    """/readyz answers 200 when ready and 503 with the reason otherwise; /healthz is 200 while serving."""

    def __init__(self, readiness: Readiness, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), _handler(readiness))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="health", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever: forever if it never ran
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def _handler(readiness: Readiness) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                code, text = 200, "ok"
            elif self.path == "/readyz":
                ready, reason = readiness.get()
                code, text = (200 if ready else 503), reason
            else:
                code, text = 404, "not found"
            body = (text + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def probe(address: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Asks a running agent at `address` whether it is ready; (ready, reason)."""
    try:
        with urllib.request.urlopen(f"http://{address}/readyz", timeout=timeout) as response:
            return True, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return False, exc.read().decode().strip() or f"HTTP {exc.code}"
    except OSError as exc:
        return False, f"agent not reachable at {address}: {exc}"
