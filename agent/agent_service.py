"""The Agent gRPC service the relay calls to read and change its Node."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from concurrent import futures

import grpc
from kubernetes.client.exceptions import ApiException

from cri_resmgr import unixsocket
from cri_resmgr._proto import agent_pb2, agent_pb2_grpc
from cri_resmgr_agent.node_ops import NodeChange, NodeOpError, NodeOps, TaintSpec

log = logging.getLogger(__name__)

_API_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
    422: grpc.StatusCode.INVALID_ARGUMENT,
}


class AgentServicer(agent_pb2_grpc.AgentServicer):
    def __init__(self, ops: NodeOps) -> None:
        self._ops = ops

    def GetNode(self, request: agent_pb2.GetNodeRequest, context: grpc.ServicerContext) -> agent_pb2.NodeReply:
        return self._run(context, "GetNode", self._ops.get_node)

    def PatchNode(self, request: agent_pb2.PatchNodeRequest, context: grpc.ServicerContext) -> agent_pb2.NodeReply:
        change = NodeChange(
            set_labels=dict(request.set_labels), remove_labels=list(request.remove_labels),
            set_annotations=dict(request.set_annotations), remove_annotations=list(request.remove_annotations),
            set_taints=[TaintSpec(t.key, t.value, t.effect) for t in request.set_taints],
            remove_taints=[TaintSpec(t.key, "", t.effect) for t in request.remove_taints])
        return self._run(context, "PatchNode", lambda: self._ops.patch_node(change))

    def UpdateNodeCapacity(self, request: agent_pb2.UpdateNodeCapacityRequest,
                           context: grpc.ServicerContext) -> agent_pb2.NodeReply:
        return self._run(context, "UpdateNodeCapacity",
                         lambda: self._ops.update_capacity(dict(request.set_capacity), list(request.remove_capacity)))

    def _run(self, context: grpc.ServicerContext, method: str, call: Callable[[], bytes]) -> agent_pb2.NodeReply:
        try:
            return agent_pb2.NodeReply(node_json=call())
        except NodeOpError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except ApiException as exc:
            code = _API_CODES.get(exc.status, grpc.StatusCode.INTERNAL)
            context.abort(code, f"API server answered {exc.status}: {_api_message(exc)}")
        except Exception as exc:
            # The API server is unreachable. Not UNAVAILABLE: that tells the relay there is no agent.
            log.warning("%s: %s", method, exc)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"Kubernetes API server unreachable: {exc}")
        raise AssertionError("unreachable")


def _api_message(exc: ApiException) -> str:
    """The API server's own message from its Status body, else the HTTP reason."""
    try:
        message = json.loads(exc.body)["message"] if exc.body else None
    except (TypeError, ValueError, KeyError):
        message = None
    return message if isinstance(message, str) else str(exc.reason or "")


class AgentServer:
    """The Agent service on a unix socket (directory 0711, socket 0600)."""

    def __init__(self, ops: NodeOps, socket_path: str, socket_mode: int = 0o600) -> None:
        self.socket_path = socket_path
        self._socket_mode = socket_mode
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-rpc"))
        agent_pb2_grpc.add_AgentServicer_to_server(AgentServicer(ops), self._server)
        self._bound = False  # the socket is ours to remove only once we bound it

    def start(self) -> None:
        # A live socket is another agent's: refused (SocketError), not taken over.
        unixsocket.prepare(os.path.abspath(self.socket_path), "agent")
        if self._server.add_insecure_port(f"unix://{os.path.abspath(self.socket_path)}") == 0:
            raise OSError(f"cannot listen on agent socket {self.socket_path}")
        self._bound = True
        self._server.start()
        os.chmod(self.socket_path, self._socket_mode)
        log.info("agent service listening on %s", self.socket_path)

    def stop(self, grace: float = 1.0) -> None:
        self._server.stop(grace).wait()
        if not self._bound:  # refused at start: the socket there is another agent's
            return
        self._bound = False
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
