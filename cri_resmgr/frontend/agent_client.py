"""The relay's client of the node agent's Agent service.

The relay works fully without an agent, so this client never keeps a
connection attempt running in the background: it connects on demand, drops the
channel when the agent is unreachable, and logs that state once (at debug
level) instead of on every call.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from cri_resmgr._proto import agent_pb2, agent_pb2_grpc
from cri_resmgr.errors import CriResmgrError

# The name its lines carried before it moved: log filters and -logger-debug (logsetup.SOURCES) match it.
log = logging.getLogger("cri_resmgr.agent_client")

DEFAULT_AGENT_SOCKET = "/var/run/cri-resmgr/cri-resmgr-agent.sock"

# One call of the Agent service on a stub; every method answers a NodeReply.
_Rpc = Callable[["agent_pb2_grpc.AgentAsyncStub"], Awaitable[agent_pb2.NodeReply]]


class AgentError(CriResmgrError):
    """The agent answered, but could not do what was asked."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"agent {method} failed ({code.name}): {details}")
        self.method = method
        self.code = code
        self.details = details


class AgentUnavailableError(AgentError):
    """No agent is reachable on the agent socket."""


class AgentClient:
    """Calls the agent on `socket_path`; every method raises AgentError or AgentUnavailableError."""

    def __init__(self, socket_path: str = DEFAULT_AGENT_SOCKET, timeout: float = 10.0) -> None:
        self.socket_path = socket_path
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: agent_pb2_grpc.AgentAsyncStub | None = None
        self._reported_unavailable = False

    async def get_node(self) -> dict[str, Any]:
        """The Node object of the agent's node, as a Kubernetes JSON dict."""
        request = agent_pb2.GetNodeRequest()
        return await self._call("GetNode", lambda stub: stub.GetNode(request, timeout=self._timeout))

    async def patch_node(self, *, set_labels: Mapping[str, str] | None = None,
                         remove_labels: Iterable[str] = (),
                         set_annotations: Mapping[str, str] | None = None,
                         remove_annotations: Iterable[str] = (),
                         set_taints: Iterable[Mapping[str, str]] = (),
                         remove_taints: Iterable[Mapping[str, str]] = ()) -> dict[str, Any]:
        """Changes labels, annotations and taints; taints are dicts with key, value, effect.

        A set taint replaces the one with the same key and effect; a removed
        taint matches by key, and by effect when one is given. Returns the
        updated Node.
        """
        request = agent_pb2.PatchNodeRequest(
            set_labels=dict(set_labels or {}),
            remove_labels=list(remove_labels),
            set_annotations=dict(set_annotations or {}),
            remove_annotations=list(remove_annotations),
            set_taints=[agent_pb2.Taint(key=t["key"], value=t.get("value", ""), effect=t.get("effect", ""))
                        for t in set_taints],
            remove_taints=[agent_pb2.TaintSelector(key=t["key"], effect=t.get("effect", ""))
                           for t in remove_taints],
        )
        return await self._call("PatchNode", lambda stub: stub.PatchNode(request, timeout=self._timeout))

    async def update_node_capacity(self, set_capacity: Mapping[str, str] | None = None,
                                   remove_capacity: Iterable[str] = ()) -> dict[str, Any]:
        """Sets or removes extended resources in the Node's capacity; returns the updated Node."""
        request = agent_pb2.UpdateNodeCapacityRequest(
            set_capacity=dict(set_capacity or {}), remove_capacity=list(remove_capacity))
        return await self._call("UpdateNodeCapacity",
                                lambda stub: stub.UpdateNodeCapacity(request, timeout=self._timeout))

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()

    async def _call(self, method: str, rpc: _Rpc) -> dict[str, Any]:
        """Calls `rpc` on the stub; returns the Node of the agent's reply."""
        if not os.path.exists(self.socket_path):
            self._note_unavailable(f"no agent socket at {self.socket_path}")
            raise AgentUnavailableError(method, grpc.StatusCode.UNAVAILABLE,
                                        f"no agent socket at {self.socket_path}")
        if self._stub is None:
            # A local subchannel pool: otherwise a new channel inherits the shared
            # subchannel's reconnect backoff and keeps failing after the agent is back.
            self._channel = grpc.aio.insecure_channel(f"unix://{os.path.abspath(self.socket_path)}",
                                                      options=[("grpc.use_local_subchannel_pool", 1)])
            self._stub = agent_pb2_grpc.AgentStub(self._channel)
        try:
            reply = await rpc(self._stub)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                # Dropping the channel stops gRPC from reconnecting in the background.
                await self.close()
                self._note_unavailable(exc.details() or "unavailable")
                raise AgentUnavailableError(method, exc.code(), exc.details() or "agent unavailable") from None
            raise AgentError(method, exc.code(), exc.details() or "") from None
        if self._reported_unavailable:
            log.info("node agent reachable again on %s", self.socket_path)
            self._reported_unavailable = False
        return _node(method, reply)

    def _note_unavailable(self, why: str) -> None:
        if not self._reported_unavailable:
            log.debug("node agent not available (%s); continuing without it", why)
            self._reported_unavailable = True


def _node(method: str, reply: agent_pb2.NodeReply) -> dict[str, Any]:
    """The Node object of a reply, as a Kubernetes JSON dict."""
    node = json.loads(reply.node_json)
    if not isinstance(node, dict):  # the agent always sends an object; anything else is its bug
        raise AgentError(method, grpc.StatusCode.INTERNAL, f"reply is not a Node object: {type(node).__name__}")
    return node
