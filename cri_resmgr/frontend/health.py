"""The HTTP endpoint on `-metrics-address`: /metrics, /healthz, /readyz, /state; anything else is 404.

/healthz answers 200 while the process serves HTTP at all. /readyz answers 200 when
the engine says it is ready (a policy in force, the runtime answering Version), else
503 with the reason. The server runs on threads of its own; readiness is asked on the
relay's event loop, where the runtime channel lives, with a bound on the wait.
`cri-resmgr -probe` asks /readyz, as `cri-resmgr-agent -probe` does the agent's.
/state is the engine's snapshot as JSON (`cri-resmgr status`), read-only (status/endpoint.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

# The name its lines carried before it moved: log filters and -logger-debug (logsetup.SOURCES) match it.
log = logging.getLogger("cri_resmgr.health")

READY_WAIT = 5.0  # seconds /readyz waits for the engine's answer


class Readiness(Protocol):
    """The engine as /readyz sees it (`engine.controller.Controller` is one)."""

    def ready(self) -> Coroutine[Any, Any, str | None]: ...


def split_address(address: str) -> tuple[str, int]:
    """HOST:PORT; an empty host (`:8891`) is 127.0.0.1, not every interface as in Go:
    metrics and health need no wider exposure unless asked for (`0.0.0.0:8891`)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def app(registry: CollectorRegistry, ready: Callable[[], str | None],
        state: Callable[[], tuple[str, bytes]] | None = None) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def dispatch(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            scraped: Iterable[bytes] = metrics(environ, start_response)
            return scraped
        if path == "/state" and state is not None:
            code, body = state()
            start_response(code, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        if path == "/healthz":
            code, text = "200 OK", "ok"
        elif path == "/readyz":
            why = ready()
            code, text = ("200 OK", "ready") if why is None else ("503 Service Unavailable", why)
        else:
            code, text = "404 Not Found", "not found"
        body = (text + "\n").encode()
        start_response(code, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    return dispatch


def on_loop(engine: Readiness, loop: asyncio.AbstractEventLoop) -> Callable[[], str | None]:
    """engine.ready(), asked from a server thread on the event loop that owns the engine."""

    def ready() -> str | None:
        try:
            return asyncio.run_coroutine_threadsafe(engine.ready(), loop).result(READY_WAIT)
        except TimeoutError:
            return f"no answer from the relay's event loop within {READY_WAIT:.0f}s"
        except RuntimeError as e:  # the loop is closed: shutting down
            return f"shutting down: {e}"

    return ready


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scrape never holds the relay's exit


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape or probe would flood the log


def listen(address: str, waiting_for: str = "the runtime") -> WSGIServer:
    """Binds `address` and serves it at once, before the engine exists: /healthz is 200, /readyz
    and the rest 503 "starting: waiting for ...", until attach() puts the real endpoint in place.
    Raises OSError when the address cannot be bound (in use: then `-probe` and `status` would
    talk to whoever holds it, so the caller refuses to start)."""
    host, port = split_address(address)
    server_class = type("Server", (_Server,), {"address_family": _family(host)})
    server: WSGIServer = make_server(host, port, _starting(waiting_for), server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def attach(server: WSGIServer, registry: CollectorRegistry, ready: Callable[[], str | None],
           state: Callable[[], tuple[str, bytes]] | None = None) -> None:
    """The real endpoint on a listen()ing server, from the next request on."""
    server.set_app(app(registry, ready, state))
    host, port = server.server_address[:2]
    log.info("metrics on http://%s:%d/metrics, health on /healthz and /readyz", host, port)


def serve(address: str, registry: CollectorRegistry, ready: Callable[[], str | None],
          state: Callable[[], tuple[str, bytes]] | None = None) -> WSGIServer:
    """listen() and attach() at once; raises OSError when the address cannot be bound."""
    server = listen(address)
    attach(server, registry, ready, state)
    return server


def _starting(waiting_for: str) -> Callable[..., Iterable[bytes]]:
    def dispatch(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        code, text = ("200 OK", "ok") if path == "/healthz" else \
            ("503 Service Unavailable", f"starting: waiting for {waiting_for}")
        body = (text + "\n").encode()
        start_response(code, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    return dispatch


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def probe(address: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Asks a running relay's /readyz at `address` (HOST:PORT); (ready, reason)."""
    host, port = split_address(address)
    url_host = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(f"http://{url_host}:{port}/readyz", timeout=timeout) as response:
            return True, response.read().decode().strip()
    except urllib.error.HTTPError as e:
        return False, e.read().decode().strip() or f"HTTP {e.code}"
    except urllib.error.URLError as e:  # one plain line: "connection refused", not "<urlopen error ...>"
        reason = e.reason
        why = (reason.strerror or str(reason)) if isinstance(reason, OSError) else str(reason)
        return False, f"relay not reachable at {address}: {why.lower()}"
    except OSError as e:
        return False, f"relay not reachable at {address}: {e.strerror or e}"
