"""Crash detection: the containers a ListContainers, StreamContainers or ContainerStatus
reply shows exited.

kubelet makes these calls all the time (PLEG relists every second, a status
poll per container), so with a policy active every one of them is read, and
the relay must read them cheaply. The replies are decoded with stripped message
types that hold only each container's id and state: the C decoder skips the
rest (labels, annotations, images, mounts) without making Python objects of it.
A ListContainers reply is first read for the states alone (`exited_in_list`):
with 100 containers that costs about 11 us, against 65 us to decode the whole
reply and look at each container. The types are wire
compatible with runtime.v1 (and v1alpha2): the field numbers are the real ones.

The transport passes these calls through unread and hands the reply's bytes to
`ReplyObserver.scan` (cri_resmgr/transport/contract.py); the call's status waits
only when a container the policy holds CPUs for has exited.

kubelet 1.36 with the CRIListStreaming gate (KEP-5825) lists with StreamContainers
instead: the same containers, in batches (containerd sends 5000 a message), each
message a StreamContainersResponse whose `containers` has ListContainersResponse's
field number, so each is read as a ListContainers reply is. The transport hands the
messages one by one to a `StreamObserver`'s reading as they pass; small ones are read
64 KiB at a time, and of each only the exited containers the policy still holds CPUs
for are kept (`Core.holding`), so what a reading keeps is bounded by the cache and
64 KiB, not by the stream. They are released only
when the stream has ended with OK: kubelet drops a stream that fails or is cancelled
midway and lists again, and so does crash detection (the next listing, or the
periodic reconcile, finds them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport.contract import ReplyObserver, StreamObserver

EXITED = pb.ContainerState.CONTAINER_EXITED

# What to do about containers seen exited: None when nothing (the call goes on at once),
# else what the call's status waits for.
OnExit = Callable[[list[str]], Awaitable[None] | None]
# Of the containers seen exited, those worth keeping until a stream ends (Core.holding).
Holding = Callable[[list[str]], list[str]]

_PACKAGE = "cri_resmgr.exits"
_STRING, _ENUM_AS_INT, _MESSAGE = 9, 5, 11
_OPTIONAL, _REPEATED = 1, 3


def _number(message: Any, field: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[field].number)


def _stripped_types() -> tuple[Any, Any, Any]:
    """(ListContainersResponse with only the containers' states, the same with ids and
    states, ContainerStatusResponse with only the id and state), with the field numbers
    of runtime.v1."""
    fd = descriptor_pb2.FileDescriptorProto(name="cri_resmgr_exits.proto", package=_PACKAGE, syntax="proto3")

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> None:
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name

    containers = _number(pb.ListContainersResponse, "containers")
    message("State", [("state", _number(pb.Container, "state"), _ENUM_AS_INT, _OPTIONAL, "")])
    message("States", [("containers", containers, _MESSAGE, _REPEATED, f".{_PACKAGE}.State")])
    message("Container", [("id", _number(pb.Container, "id"), _STRING, _OPTIONAL, ""),
                          ("state", _number(pb.Container, "state"), _ENUM_AS_INT, _OPTIONAL, "")])
    message("List", [("containers", containers, _MESSAGE, _REPEATED, f".{_PACKAGE}.Container")])
    message("Status", [("id", _number(pb.ContainerStatus, "id"), _STRING, _OPTIONAL, ""),
                       ("state", _number(pb.ContainerStatus, "state"), _ENUM_AS_INT, _OPTIONAL, "")])
    message("StatusReply", [("status", _number(pb.ContainerStatusResponse, "status"), _MESSAGE, _OPTIONAL,
                             f".{_PACKAGE}.Status")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
                 for name in ("States", "List", "StatusReply"))  # type: ignore[return-value]


_STATES, _LIST, _STATUS = _stripped_types()
# A container's state EXITED as it is coded: the field's tag (a varint), then 2.
_EXITED_CODED = bytes([_number(pb.Container, "state") << 3, EXITED])


def exited_in_list(reply: bytes | bytearray | memoryview) -> list[str]:
    """Ids of the containers a serialized ListContainersResponse shows exited.

    Most replies show none: the states alone are decoded first, and re-encoded
    without everything else (a few bytes a container, all in C) to look for
    EXITED; only then are the ids read, which costs a Python object a container.
    """
    try:
        states = _STATES.FromString(reply)
        states.DiscardUnknownFields()
        if _EXITED_CODED not in states.SerializeToString():
            return []
        return [c.id for c in _LIST.FromString(reply).containers if c.state == EXITED]
    except DecodeError:
        return []  # the runtime's reply goes to kubelet as it is; reconciliation catches up


def exited_in_status(reply: bytes | memoryview) -> list[str]:
    """The container's id if a serialized ContainerStatusResponse shows it exited."""
    try:
        status = _STATUS.FromString(reply).status
    except DecodeError:
        return []
    return [status.id] if status.state == EXITED and status.id else []


def _observer(find: Callable[[bytes | memoryview], list[str]], on_exit: OnExit) -> ReplyObserver:
    def scan(reply: bytes | memoryview) -> Awaitable[None] | None:
        exited = find(reply)
        return on_exit(exited) if exited else None
    return ReplyObserver(scan)


# Small messages (CRI-O streams one container a message) are read together, this many
# bytes at a time: messages of a repeated field concatenated are one message holding all
# their items, and one decode of 64 KiB costs about what a decode of one container does.
_BATCH = 64 << 10


class _StreamedExits:
    """One StreamContainers reply, read message by message (a contract.StreamReading)."""

    __slots__ = ("_on_exit", "_holding", "_held", "_pending")

    def __init__(self, on_exit: OnExit, holding: Holding):
        self._on_exit = on_exit
        self._holding = holding
        self._held: dict[str, None] = {}  # in the order seen, once each
        self._pending = bytearray()  # small messages not read yet, at most _BATCH bytes

    def message(self, data: bytes | memoryview) -> None:
        if len(data) >= _BATCH:  # read where it lies
            self._read_pending()
            self._keep(exited_in_list(data))
            return
        self._pending += data
        if len(self._pending) >= _BATCH:
            self._read_pending()

    def complete(self) -> Awaitable[None] | None:
        self._read_pending()
        return self._on_exit(list(self._held)) if self._held else None

    def _read_pending(self) -> None:
        if self._pending:
            self._keep(exited_in_list(self._pending))
            self._pending.clear()

    def _keep(self, exited: list[str]) -> None:
        if exited:
            self._held.update(dict.fromkeys(self._holding(exited)))


def interceptors(on_exit: OnExit, holding: Holding) -> dict[str, ReplyObserver | StreamObserver]:
    """The interception-table entries that watch for exited containers."""
    return {"ListContainers": _observer(exited_in_list, on_exit),
            "StreamContainers": StreamObserver(lambda: _StreamedExits(on_exit, holding)),
            "ContainerStatus": _observer(exited_in_status, on_exit)}
