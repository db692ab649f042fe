"""How both transports refuse a bad request and report a failed interceptor.

A client can send any number of malformed requests, so each costs one log line
naming the method and the reason, never a traceback: the log of a node
component must not be something a client can flood.
"""

from __future__ import annotations

import logging
import re
import time

import grpc
from google.protobuf.message import DecodeError, Message

from cri_resmgr.transport.contract import InterceptError


def decode_request(request_type: type[Message], method: str, data: bytes) -> Message:
    """The request an interceptor gets; a body that does not decode fails the call
    with INTERNAL, as the runtime's gRPC server answers it."""
    try:
        return request_type.FromString(data)
    except DecodeError as e:
        raise InterceptError(grpc.StatusCode.INTERNAL, f"cri-resmgr: cannot decode the {method} request: {e}") from None


def too_large(size: int, limit: int) -> str:
    """grpc-go's words for a message over the limit (RESOURCE_EXHAUSTED): what containerd and
    CRI-O answer kubelet for a request, and what kubelet's own client says of a reply."""
    return f"grpc: received message larger than max ({size} vs. {limit})"


# grpcio's words for the same, as its channel reports a reply over its limit.
_GRPCIO_TOO_LARGE = re.compile(r"(?:Stream removed \()?(?:CLIENT: )?Received message larger than max "
                               r"\((\d+) vs\. (\d+)\)\)?")


def in_kubelets_words(code: grpc.StatusCode, details: str) -> str:
    """`details` of the runtime call's error as kubelet would have read them calling the
    runtime itself: a reply over the relay channel's limit (kubelet's own) is named in
    grpc-go's words rather than grpcio's; anything else is unchanged."""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        m = _GRPCIO_TOO_LARGE.fullmatch(details)
        if m:
            return too_large(int(m.group(1)), int(m.group(2)))
    return details


class FailureLog:
    """Logs calls the relay fails: one line each. An interceptor's unexpected
    exception is a bug: its traceback is logged at debug level, at most once per
    `interval` seconds."""

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
