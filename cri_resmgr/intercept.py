"""The interception contract between the relay (transport) and whatever decides.

The relay looks a call's short method name (e.g. "CreateContainer") up in a
name-keyed table. No entry: the call is relayed as raw bytes and never parsed.
An entry: the relay decodes the request (with runtime.v1 classes, as v1alpha2 is
wire-identical), awaits the interceptor, and encodes what it returns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

import grpc
from google.protobuf.message import DecodeError, Message

# Sends a (possibly rewritten) request to the runtime on the caller's path,
# metadata and deadline; returns the decoded reply or raises grpc.aio.AioRpcError.
Forward = Callable[[Message], Awaitable[Message]]


@dataclass(frozen=True)
class Request:
    name: str  # short method name: "CreateContainer"
    path: str  # the path the client called: "/runtime.v1alpha2.RuntimeService/CreateContainer"
    message: Message
    forward: Forward


Interceptor = Callable[[Request], Awaitable[Message]]
InterceptionTable = Mapping[str, Interceptor]


class InterceptError(Exception):
    """Raised by an interceptor to fail the caller's request with a gRPC status."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def decode_request(request_type: type[Message], method: str, data: bytes) -> Message:
    """The request an interceptor gets; a body that does not decode fails the call
    with INTERNAL, as the runtime's gRPC server answers it."""
    try:
        return request_type.FromString(data)
    except DecodeError as e:
        raise InterceptError(grpc.StatusCode.INTERNAL, f"cri-resmgr: cannot decode the {method} request: {e}") from None


class FailureLog:
    """Logs calls the relay fails: one line each, naming the method and the reason,
    so a client sending bad requests cannot flood the log with tracebacks.
    An interceptor's unexpected exception is a bug: its traceback is logged at
    debug level, at most once per `interval` seconds."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0):
        self.log = logger
        self.interval = interval
        self._last = -interval

    def refused(self, path: str, reason: str) -> None:
        self.log.warning("refused %s: %s", path, reason)

    def failed(self, path: str, error: BaseException) -> None:
        self.log.error("interceptor for %s failed: %s: %s", path, type(error).__name__, error)
        now = time.monotonic()
        if self.log.isEnabledFor(logging.DEBUG) and now - self._last >= self.interval:
            self._last = now
            self.log.debug("traceback of the %s failure (one per %.0f s)", path, self.interval, exc_info=error)
