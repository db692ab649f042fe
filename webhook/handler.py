"""HTTP handling of one connection: /mutate for AdmissionReviews, /healthz
for probes. Every review leaves exactly one log line."""
from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .review import MalformedReview, review

if TYPE_CHECKING:
    from .server import WebhookServer

MUTATE_PATH = "/mutate"
HEALTH_PATH = "/healthz"
# A rejected body is read and dropped, up to this many times the body limit,
# so that the client, still sending it, gets the reply rather than a reset.
DISCARD_FACTOR = 4
DISCARD_TIMEOUT = 2.0


class RequestRejected(Exception):
    """A request answered with an HTTP error; the message says why."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class AdmissionHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses connections
    server_version = "cri-resmgr-webhook"
    sys_version = ""
    server: WebhookServer

    def setup(self) -> None:
        super().setup()
        # What StreamRequestHandler.setup does with a class's `timeout`, per server.
        self.connection.settimeout(self.server.config.idle_timeout)

    def parse_request(self) -> bool:
        # The request line has arrived: from here on the connection is busy
        # and a drain waits for it.
        self.server.connections.set_idle(self.connection, False)
        return super().parse_request()

    def handle_one_request(self) -> None:
        super().handle_one_request()
        self.server.connections.set_idle(self.connection, True)
        if self.server.connections.draining:
            self.close_connection = True

    def do_GET(self) -> None:
        if urlsplit(self.path).path == HEALTH_PATH:
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send_error(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}")

    def do_POST(self) -> None:
        self._unread = 0
        if urlsplit(self.path).path != MUTATE_PATH:
            self._send_error(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}: POST reviews to {MUTATE_PATH}")
            return
        try:
            body = self._read_json_body()
            result = review(body, self.server.config.patch_pod)
        except RequestRejected as err:
            self.server.logger.warning("review from %s rejected: %s", self._peer(), err)
            self._send_error(err.status, str(err))
            return
        except MalformedReview as err:
            self.server.logger.warning("review from %s rejected: %s", self._peer(), err)
            self._send_error(HTTPStatus.BAD_REQUEST, str(err))
            return
        self.server.logger.info(result.log_line())
        payload = json.dumps(result.response, separators=(",", ":")).encode()
        self._send(HTTPStatus.OK, payload, "application/json")

    def _read_json_body(self) -> Any:
        if self.headers.get("Transfer-Encoding"):
            raise RequestRejected(
                HTTPStatus.LENGTH_REQUIRED,
                "Transfer-Encoding bodies are not supported: send Content-Length",
            )
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise RequestRejected(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required")
        try:
            length = int(length_header)
            if length < 0:
                raise ValueError
        except ValueError:
            raise RequestRejected(HTTPStatus.BAD_REQUEST, f"invalid Content-Length {length_header!r}") from None
        self._unread = length
        content_type = self.headers.get("Content-Type", "")
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            raise RequestRejected(
                HTTPStatus.BAD_REQUEST,
                f"unsupported Content-Type {content_type!r}: expected application/json",
            )
        limit = self.server.config.max_body_bytes
        if length > limit:
            raise RequestRejected(
                HTTPStatus.BAD_REQUEST,
                f"request body of {length} bytes exceeds the limit of {limit} bytes",
            )
        data = self.rfile.read(length)
        self._unread = 0
        if len(data) < length:
            raise RequestRejected(
                HTTPStatus.BAD_REQUEST, f"request body ended after {len(data)} of {length} bytes"
            )
        try:
            return json.loads(data)
        except RecursionError:
            raise RequestRejected(HTTPStatus.BAD_REQUEST, "malformed JSON: nested too deeply") from None
        except ValueError as err:
            raise RequestRejected(HTTPStatus.BAD_REQUEST, f"malformed JSON: {err}") from None

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _send_error(self, status: HTTPStatus, message: str) -> None:
        # A rejected request may leave its body unread: the connection
        # cannot carry another request after it.
        self.close_connection = True
        self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8")
        self._discard_unread_body()

    def _discard_unread_body(self) -> None:
        unread = getattr(self, "_unread", 0)
        self._unread = 0
        if not 0 < unread <= DISCARD_FACTOR * self.server.config.max_body_bytes:
            return
        self.wfile.flush()
        self.connection.settimeout(DISCARD_TIMEOUT)
        try:
            while unread > 0:
                chunk = self.rfile.read(min(unread, 65536))
                if not chunk:
                    break
                unread -= len(chunk)
        except OSError:
            pass

    def _peer(self) -> str:
        host, port = self.client_address[:2]
        return f"{host}:{port}"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base class signature
        # Reviews log their own line; per-request access lines would double it.
        self.server.logger.debug("%s %s", self._peer(), format % args)
