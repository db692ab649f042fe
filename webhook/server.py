"""The HTTPS server: TLS per connection in the connection's own thread,
plain HTTP answered with 400, and a drain that lets in-flight reviews finish."""
from __future__ import annotations

import logging
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from .handler import AdmissionHandler
from .review import PodPatcher, annotate_resources

DEFAULT_PORT = 8443
# The API server's own limit on a request body; no pod it admits is larger.
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
TLS_RECORD_HANDSHAKE = 0x16
PLAIN_HTTP_REPLY = b"Client sent an HTTP request to an HTTPS server.\n"


@dataclass(frozen=True)
class ServerConfig:
    """What a WebhookServer needs besides its address and TLS context."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # How long a connection may take to say something (handshake, next
    # request on a kept-alive connection) before it is closed.
    idle_timeout: float = 30.0
    patch_pod: PodPatcher = annotate_resources


class Connections:
    """Open connections and whether each is idle between requests, so that a
    drain can close the idle ones at once and wait for the busy ones."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle: dict[socket.socket, bool] = {}
        self._draining = False

    @property
    def draining(self) -> bool:
        return self._draining

    def opened(self, sock: socket.socket) -> None:
        with self._cond:
            self._idle[sock] = True

    def set_idle(self, sock: socket.socket, idle: bool) -> None:
        with self._cond:
            if sock in self._idle:
                self._idle[sock] = idle
            if idle and self._draining:
                _shutdown_quietly(sock)

    def closed(self, sock: socket.socket) -> None:
        with self._cond:
            self._idle.pop(sock, None)
            self._cond.notify_all()

    def count(self) -> int:
        with self._cond:
            return len(self._idle)

    def drain(self, grace: float) -> bool:
        """Closes idle connections, waits up to grace seconds for busy ones;
        returns whether all closed in time."""
        with self._cond:
            self._draining = True
            for sock, idle in self._idle.items():
                if idle:
                    _shutdown_quietly(sock)
            return self._cond.wait_for(lambda: not self._idle, timeout=grace)


class WebhookServer(ThreadingHTTPServer):
    """Serves AdmissionHandler over TLS; one thread per connection."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        tls_context: ssl.SSLContext,
        config: ServerConfig = ServerConfig(),
        logger: logging.Logger | None = None,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.tls_context = tls_context
        self.config = config
        self.logger = logger or logging.getLogger("cri_resmgr_webhook")
        self.connections = Connections()
        super().__init__(address, AdmissionHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS lookup that
        # can stall start-up for seconds; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs in the connection's thread: the TLS handshake happens here,
        not in the accept loop, so a slow or plain-HTTP client delays no one."""
        raw: socket.socket = request
        raw.settimeout(self.config.idle_timeout)
        # A reply goes out as header and body writes: without NODELAY the
        # second waits for the client's delayed ACK, some 40 ms.
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            first = raw.recv(1, socket.MSG_PEEK)
        except OSError:
            return
        if not first:
            return
        if first[0] != TLS_RECORD_HANDSHAKE:
            self._refuse_plaintext(raw, client_address, first)
            return
        try:
            tls = self.tls_context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as err:
            self.logger.debug("TLS handshake with %s failed: %s", _peer(client_address), err)
            return
        self.connections.opened(tls)
        try:
            super().finish_request(tls, client_address)  # the handler, on the TLS socket
        except OSError as err:
            self.logger.debug("connection from %s: %s", _peer(client_address), err)
        finally:
            self.connections.closed(tls)
            _shutdown_quietly(tls)
            tls.close()

    def _refuse_plaintext(self, raw: socket.socket, client_address: Any, first: bytes) -> None:
        if not first.isalpha():
            self.logger.info("refused non-TLS connection from %s", _peer(client_address))
            return
        self.logger.info("refused plain HTTP request from %s: HTTPS only", _peer(client_address))
        reply = (
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
            % (len(PLAIN_HTTP_REPLY), PLAIN_HTTP_REPLY)
        )
        try:
            raw.sendall(reply)
            raw.shutdown(socket.SHUT_WR)
            # Reading what the client sent before closing keeps the kernel
            # from answering unread data with a reset that loses the reply.
            raw.settimeout(1.0)
            for _ in range(64):
                if not raw.recv(4096):
                    break
        except OSError:
            pass

    def drain(self, grace: float = 10.0) -> bool:
        """After shutdown(): lets in-flight reviews finish, closes the rest."""
        return self.connections.drain(grace)


def _shutdown_quietly(sock: socket.socket) -> None:
    try:
        # The plain socket's shutdown: SSLSocket.shutdown would drop the TLS
        # object under a thread that may be blocked reading on it.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _peer(client_address: Any) -> str:
    if isinstance(client_address, tuple) and len(client_address) >= 2:
        return f"{client_address[0]}:{client_address[1]}"
    return str(client_address)
