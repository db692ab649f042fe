"""The agent's client of the relay's Config service."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

import grpc

from cri_resmgr._proto import config_pb2, config_pb2_grpc
from cri_resmgr.errors import CriResmgrError


class RelayUnavailable(CriResmgrError):
    """The relay did not answer (not running, or restarting)."""


R = TypeVar("R")


class RelayConfigClient:
    def __init__(self, socket_path: str, timeout: float = 30.0) -> None:
        self.socket_path = socket_path
        self._timeout = timeout
        self._channel: grpc.Channel | None = None

    def set_config(self, node_name: str, data: Mapping[str, str], source: str,
                   resource_version: str = "") -> str | None:
        """Returns the relay's rejection reason, or None when it accepted the configuration."""
        request = config_pb2.SetConfigRequest(node_name=node_name, data=dict(data), source=source,
                                              resource_version=resource_version)
        return self._call(lambda stub: stub.SetConfig(request, timeout=self._timeout)).error or None

    def get_config(self) -> dict[str, str]:
        return dict(self._call(lambda stub: stub.GetConfig(config_pb2.GetConfigRequest(), timeout=self._timeout)).data)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _call(self, call: Callable[[config_pb2_grpc.ConfigStub], R]) -> R:
        if not os.path.exists(self.socket_path):
            raise RelayUnavailable(f"no config socket at {self.socket_path}")
        if self._channel is None:
            # A local subchannel pool: otherwise a new channel inherits the shared
            # subchannel's reconnect backoff and keeps failing after the relay is back.
            self._channel = grpc.insecure_channel(f"unix://{os.path.abspath(self.socket_path)}",
                                                  options=[("grpc.use_local_subchannel_pool", 1)])
        stub = config_pb2_grpc.ConfigStub(self._channel)
        try:
            return call(stub)
        except grpc.RpcError as exc:
            # What a channel raises is also a grpc.Call (its code and details).
            if isinstance(exc, grpc.Call) and exc.code() in (grpc.StatusCode.UNAVAILABLE,
                                                              grpc.StatusCode.DEADLINE_EXCEEDED):
                # A fresh channel next time: a failed one waits out gRPC's own
                # reconnect backoff (up to minutes) before trying again.
                self.close()
                raise RelayUnavailable(f"relay on {self.socket_path}: {exc.details()}") from None
            raise
