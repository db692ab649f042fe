"""The relay's Config gRPC service: the node agent pushes configurations here.

The service only carries configurations; deciding whether one is acceptable and
applying it belongs to the applier handed in (the relay's configuration
framework). Applies are serialized so that a push never races another.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Awaitable
from typing import Protocol

import grpc

from cri_resmgr import unixsocket
from cri_resmgr._proto import config_pb2, config_pb2_grpc
from cri_resmgr.config.settings import DEFAULT_CONFIG_SOCKET

log = logging.getLogger(__name__)


class ConfigApplier(Protocol):
    """What the Config service needs from the relay's configuration framework."""

    def apply(self, data: dict[str, str], source: str) -> str | None | Awaitable[str | None]:
        """Validates and applies `data`; returns the rejection reason, or None when accepted."""

    def current(self) -> dict[str, str]:
        """The configuration modules in force."""


class ConfigServicer(config_pb2_grpc.ConfigServicer):
    def __init__(self, applier: ConfigApplier) -> None:
        self._applier = applier
        self._lock = asyncio.Lock()

    async def SetConfig(self, request: config_pb2.SetConfigRequest,
                        context: grpc.aio.ServicerContext[config_pb2.SetConfigRequest, config_pb2.SetConfigReply],
                        ) -> config_pb2.SetConfigReply:
        data = dict(request.data)
        source = request.source or f"agent of node {request.node_name or '?'}"
        async with self._lock:
            try:
                result = self._applier.apply(data, source)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:  # an applier bug must still answer the agent
                log.exception("applying configuration from %s failed", source)
                result = f"internal error applying configuration: {exc}"
        if result:
            log.warning("rejected configuration from %s: %s", source, result)
            return config_pb2.SetConfigReply(error=str(result))
        log.info("accepted configuration from %s (modules: %s)", source, ", ".join(sorted(data)) or "none")
        return config_pb2.SetConfigReply()

    async def GetConfig(self, request: config_pb2.GetConfigRequest,
                        context: grpc.aio.ServicerContext[config_pb2.GetConfigRequest, config_pb2.GetConfigReply],
                        ) -> config_pb2.GetConfigReply:
        return config_pb2.GetConfigReply(data=dict(self._applier.current()))


def prepare_socket_path(path: str) -> None:
    """Creates the socket's directory (0711: others may reach but not list it) and removes a stale
    socket; raises SocketError for a live one (another relay's: taking it over would leave that
    relay without its Config service, silently) or a path that is not a socket."""
    unixsocket.prepare(os.path.abspath(path), "config")


class ConfigServer:
    """The Config service listening on a unix socket."""

    def __init__(self, applier: ConfigApplier, socket_path: str = DEFAULT_CONFIG_SOCKET,
                 socket_mode: int = 0o600) -> None:
        self.socket_path = socket_path
        self._socket_mode = socket_mode
        self._servicer = ConfigServicer(applier)
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        prepare_socket_path(self.socket_path)
        server = grpc.aio.server()
        config_pb2_grpc.add_ConfigServicer_to_server(self._servicer, server)
        if server.add_insecure_port(f"unix://{os.path.abspath(self.socket_path)}") == 0:
            raise OSError(f"cannot listen on config socket {self.socket_path}")
        await server.start()
        os.chmod(self.socket_path, self._socket_mode)
        self._server = server
        log.info("config service listening on %s", self.socket_path)

    async def stop(self, grace: float | None = 1.0) -> None:
        if self._server is None:
            return
        await self._server.stop(grace)
        self._server = None
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
