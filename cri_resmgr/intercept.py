"""The interception contract between the relay (transport) and whatever decides.

The relay looks a call's short method name (e.g. "CreateContainer") up in a
name-keyed table. No entry: the call is relayed as raw bytes and never parsed.
An entry: the relay decodes the request (with runtime.v1 classes, as v1alpha2 is
wire-identical), awaits the interceptor, and encodes what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

import grpc
from google.protobuf.message import Message

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
