"""A gRPC channel to the runtime, carrying raw bytes."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from cri_resmgr._proto import runtime_v1_pb2
from cri_resmgr.transport import sockets

log = logging.getLogger(__name__)

_Reply = TypeVar("_Reply", bound=Message)

# kubelet's limit; gRPC's 4 MiB default makes a big ListContainers fail through
# the relay although it works direct, so both the server and this channel set it.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Calls must succeed again soon after a runtime restart, not after a long
    # exponential backoff.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # Not a backoff despite its name: gRPC gives each connection attempt this long to get
    # the runtime's SETTINGS frame, and fails the calls waiting on it (UNAVAILABLE, "timed
    # out before receiving SETTINGS frame") however long their deadlines. At 100 ms a busy
    # node's runtime, or one just restarted, failed the relay's start-up adoption and
    # updates; gRPC's default. A runtime that is gone refuses the connect at once anyway.
    ("grpc.min_reconnect_backoff_ms", 20_000),
    ("grpc.enable_retries", 0),
)

VERSION_PATHS = ("/runtime.v1.RuntimeService/Version", "/runtime.v1alpha2.RuntimeService/Version")


class Upstream:
    """One runtime socket; multicallables are made once per method path."""

    def __init__(self, address: str):
        self.path = sockets.strip_scheme(address)
        self.channel = grpc.aio.insecure_channel("unix://" + self.path, options=CHANNEL_OPTIONS)
        self.up: bool | None = None  # known once watch() runs: the gRPC transport's runtime_up
        # No serializers: messages cross as the bytes on the wire.
        self._unary: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {}
        self._unary_stream: dict[str, grpc.aio.UnaryStreamMultiCallable[bytes, bytes]] = {}
        self._stream: dict[str, grpc.aio.StreamStreamMultiCallable[bytes, bytes]] = {}

    def unary(self, path: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
        mc = self._unary.get(path)
        if mc is None:
            mc = self._unary[path] = self.channel.unary_unary(path)
        return mc

    def unary_stream(self, path: str) -> grpc.aio.UnaryStreamMultiCallable[bytes, bytes]:
        mc = self._unary_stream.get(path)
        if mc is None:
            mc = self._unary_stream[path] = self.channel.unary_stream(path)
        return mc

    def stream_stream(self, path: str) -> grpc.aio.StreamStreamMultiCallable[bytes, bytes]:
        mc = self._stream.get(path)
        if mc is None:
            mc = self._stream[path] = self.channel.stream_stream(path)
        return mc

    async def call(self, path: str, request: Message, reply_type: type[_Reply],
                   timeout: float | None = 10.0) -> _Reply:
        """A typed unary call the relay makes on its own (start-up adoption, updates)."""
        data = await self.unary(path)(request.SerializeToString(), timeout=timeout)
        return reply_type.FromString(data)

    async def version(self, timeout: float = 2.0) -> runtime_v1_pb2.VersionResponse:
        """Version over runtime.v1, falling back to v1alpha2 for older runtimes."""
        req = runtime_v1_pb2.VersionRequest(version="0.1.0")
        try:
            return await self.call(VERSION_PATHS[0], req, runtime_v1_pb2.VersionResponse, timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            return await self.call(VERSION_PATHS[1], req, runtime_v1_pb2.VersionResponse, timeout)

    async def wait_ready(self, timeout: float | None = None, log_every: float = 5.0,
                         what: str = "runtime") -> runtime_v1_pb2.VersionResponse:
        """Wait until the socket exists and answers Version, logging while waiting."""
        start = time.monotonic()
        last_log = start - log_every
        last_error = "socket does not exist yet"
        while True:
            if self._socket_exists():
                try:
                    return await self.version()
                except grpc.aio.AioRpcError as e:
                    last_error = f"{e.code().name}: {e.details()}"
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                raise TimeoutError(f"{what} at {self.path} not ready after {timeout:.0f}s: {last_error}")
            if now - last_log >= log_every:
                log.info("waiting for %s at %s (%s)", what, self.path, last_error)
                last_log = now
            await asyncio.sleep(0.2)

    async def watch(self) -> None:
        """Logs the runtime going away and coming back, once per transition, however many
        calls fail meanwhile (the frame transport's counterpart: FrameRelay.runtime_lost).
        The relay serves only once the runtime answered, so it starts up (`self.up`)."""
        self.up = True
        state = self.channel.get_state()
        while True:
            await self.channel.wait_for_state_change(state)
            state = self.channel.get_state()
            if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                self.mark(False)
            elif state == grpc.ChannelConnectivity.READY:
                self.mark(True)

    def mark(self, up: bool, why: str = "") -> None:
        """The runtime found up or down (a channel state, or the front end's probe); logged
        once per transition."""
        if self.up is not None and up == self.up:
            return
        if not up:
            log.warning("runtime at %s lost%s: callers get UNAVAILABLE until it returns", self.path,
                        f" ({why})" if why else "")
        elif self.up is not None:
            log.info("runtime at %s is back", self.path)
        self.up = up

    def _socket_exists(self) -> bool:
        return os.path.exists(self.path)

    async def close(self) -> None:
        await self.channel.close()
