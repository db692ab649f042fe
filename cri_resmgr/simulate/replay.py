"""Re-drives a recorded CRI session against a runtime (or a relay in front of one).

Each recorded request is sent again, in order, with the pod and container ids of the
recording replaced by the ones the runtime gives this time (learnt from the replies
to RunPodSandbox and CreateContainer). Image service calls are left out: the images
are assumed present. Server-streaming calls are left out. The log directories
kubelet would create are created. With `timing`, the recorded gaps between requests
are kept (divided by `speed`). Each call's outcome is compared with the recorded one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import Message

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.simulate.calls import Call
from cri_resmgr.transport.methods import MethodTable
from cri_resmgr.transport.upstream import MAX_MESSAGE_BYTES

__all__ = ["Replayed", "RuntimeUnavailable", "replay", "map_ids"]


@dataclass(frozen=True)
class Replayed:
    call: Call
    code: str  # the runtime's answer this time
    details: str
    new_id: str = ""  # the id a RunPodSandbox or CreateContainer got this time

    @property
    def differs(self) -> bool:
        return self.code != self.call.code


@dataclass
class Result:
    replayed: list[Replayed] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # method -> calls not sent
    ids: dict[str, str] = field(default_factory=dict)  # recorded id -> new id

    @property
    def differing(self) -> int:
        return sum(1 for r in self.replayed if r.differs)


def replay(calls: Sequence[Call], socket: str, timing: bool = False, speed: float = 1.0, timeout: float = 60.0,
           each: Callable[[Replayed], None] | None = None) -> Result:
    """Raises RuntimeUnavailable when nothing answers on `socket`."""
    table = MethodTable()
    target = socket if socket.startswith("unix:") else "unix://" + os.path.abspath(socket)
    result = Result()
    start = time.monotonic()
    # kubelet's 16 MiB, as the relay's legs: a recorded 5-16 MiB ListContainers reply
    # replays (gRPC's default of 4 MiB would fail it with RESOURCE_EXHAUSTED).
    options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    with grpc.insecure_channel(target, options=options) as channel:
        _check_runtime(channel, socket, min(timeout, 10.0))
        for call in calls:
            method = table.lookup(call.path)
            if method is None or method.service.endswith("ImageService") or method.server_streaming \
                    or method.client_streaming:
                result.skipped[call.method] = result.skipped.get(call.method, 0) + 1
                continue
            request = type(call.request)()
            request.CopyFrom(call.request)
            map_ids(request, result.ids)
            _make_log_dirs(request)
            if timing and call.time is not None:
                delay = start + call.time / speed - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            done = _send(channel, call, request, timeout)
            _learn(call, done, result.ids)
            result.replayed.append(done)
            if each is not None:
                each(done)
    return result


class RuntimeUnavailable(CriResmgrError):
    pass


def _check_runtime(channel: grpc.Channel, socket: str, timeout: float) -> None:
    """Before anything is sent (or a log directory made): is a runtime there?"""
    version: grpc.UnaryUnaryMultiCallable[pb.VersionRequest, pb.VersionResponse] = channel.unary_unary(
        "/runtime.v1.RuntimeService/Version", request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.VersionResponse.FromString)
    try:
        version(pb.VersionRequest(), timeout=timeout)
    except grpc.RpcError as e:
        details = e.details() if callable(getattr(e, "details", None)) else str(e)
        raise RuntimeUnavailable(f"the runtime at {socket} does not answer Version: {details}") from None


def _send(channel: grpc.Channel, call: Call, request: Message, timeout: float) -> Replayed:
    reply_class = type(call.reply) if call.reply is not None else Message
    stub: grpc.UnaryUnaryMultiCallable[Message, bytes] = channel.unary_unary(
        call.path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=lambda b: b)
    try:
        data: bytes = stub(request, timeout=timeout)
    except grpc.RpcError as e:
        code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
        details = e.details() if callable(getattr(e, "details", None)) else str(e)
        return Replayed(call, code.name, details or "")
    new_id = ""
    if call.method in ("RunPodSandbox", "CreateContainer") and reply_class is not Message:
        reply = reply_class.FromString(data)
        new_id = reply.pod_sandbox_id if isinstance(reply, pb.RunPodSandboxResponse) else \
            reply.container_id if isinstance(reply, pb.CreateContainerResponse) else ""
    return Replayed(call, "OK", "", new_id)


def _learn(call: Call, done: Replayed, ids: dict[str, str]) -> None:
    if not done.new_id or call.reply is None:
        return
    old = call.reply.pod_sandbox_id if isinstance(call.reply, pb.RunPodSandboxResponse) else \
        call.reply.container_id if isinstance(call.reply, pb.CreateContainerResponse) else ""
    if old:
        ids[old] = done.new_id


def map_ids(message: Message, ids: dict[str, str]) -> None:
    """Replaces, anywhere in the message, a string that is a recorded id with its new id."""
    if not ids:
        return
    for fd, value in message.ListFields():
        if fd.message_type is not None:
            if fd.message_type.GetOptions().map_entry:
                continue  # labels and annotations: names, not ids
            for sub in (value if fd.is_repeated else [value]):
                map_ids(sub, ids)
        elif fd.type == fd.TYPE_STRING:
            if fd.is_repeated:
                value[:] = [ids.get(v, v) for v in value]
            elif value in ids:
                setattr(message, fd.name, ids[value])


def _make_log_dirs(request: Message) -> None:
    """kubelet creates the pod's log directory and each container's below it."""
    if isinstance(request, pb.RunPodSandboxRequest) and request.config.log_directory:
        os.makedirs(request.config.log_directory, exist_ok=True)
    elif isinstance(request, pb.CreateContainerRequest) and request.sandbox_config.log_directory \
            and request.config.log_path:
        os.makedirs(os.path.dirname(os.path.join(request.sandbox_config.log_directory, request.config.log_path)),
                    exist_ok=True)
