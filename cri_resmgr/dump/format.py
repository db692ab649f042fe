"""Turning dump records into text: the human format and JSON lines.

Records are what the writer thread produces from the relay's raw captures, with
the message already decoded.  Formatters are pure (record -> text) so they can
be tested without threads or files; the registry FORMATS maps the -dump-format
value to a formatter class.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from cri_resmgr.dump.redact import redact_envs
from cri_resmgr.dump.rules import Level
from cri_resmgr.dump.yaml_text import to_yaml

REQUEST = "request"
REPLY = "reply"
BODY_INDENT = "    "



@dataclass
class CallRecord:
    """One request or reply message (or the end of a failed/streamed call)."""

    time: float  # wall clock, seconds since the epoch, taken when the relay saw it
    direction: str  # REQUEST or REPLY
    path: str  # "/runtime.v1.RuntimeService/CreateContainer"
    service: str  # "runtime.v1.RuntimeService"
    method: str  # "CreateContainer"
    call_id: int
    level: Level  # NAME or FULL
    qualifier: str = ""
    message: Message | None = None  # decoded body, when the method is known and it decoded
    raw_size: int | None = None  # body size in bytes; None when there was no body
    decode_error: str = ""
    latency: float | None = None  # seconds, replies only
    code: str | None = None  # gRPC status code name, replies only
    details: str = ""  # gRPC status message of a failed call

    @property
    def failed(self) -> bool:
        return self.code not in (None, "OK")


@dataclass
class NoteRecord:
    time: float
    text: str


@dataclass
class CountRecord:
    """Calls per method over one count period (only methods with calls)."""

    time: float
    period: float  # seconds covered
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (calls, failed)


@dataclass
class DropRecord:
    time: float
    dropped: int  # since the previous drop report
    total: int


Record = CallRecord | NoteRecord | CountRecord | DropRecord


class Formatter(Protocol):
    def __call__(self, record: Record) -> str: ...


# -- message bodies ----------------------------------------------------------------


def message_to_plain(message: Message) -> dict[str, Any]:
    """A message as dicts/lists/scalars for YAML: like MessageToDict, but 64-bit
    integers stay numbers and bytes are shown as text when they are text."""
    out: dict[str, Any] = {}
    for fd, value in message.ListFields():
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: _plain_scalar(value_fd, v) for k, v in value.items()}
        elif fd.is_repeated:
            out[fd.name] = [_plain_scalar(fd, v) for v in value]
        else:
            out[fd.name] = _plain_scalar(fd, value)
    return out


def _plain_scalar(fd: FieldDescriptor, value: Any) -> Any:
    if fd.message_type is not None:
        return message_to_plain(value)
    if fd.enum_type is not None:
        enum_value = fd.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    return value


def _body_summary(record: CallRecord) -> str | None:
    """Why there is no decoded body, or None when there is one (or none is due)."""
    if record.message is not None or record.raw_size is None:
        return None
    if record.decode_error:
        return f"<{record.raw_size} bytes, undecodable: {record.decode_error}>"
    return f"<{record.raw_size} bytes, method unknown to the CRI table>"


# -- human ---------------------------------------------------------------------------


def _local_time(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _latency(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}ms" if seconds < 1.0 else f"{seconds:.3f}s"


class HumanFormat:
    """Header lines ``TIME => #ID Method [qualifier]``, YAML bodies indented under them."""

    def __init__(self, redact: bool = True) -> None:
        self.redact = redact

    def __call__(self, record: Record) -> str:
        if isinstance(record, CallRecord):
            return self._call(record)
        stamp = _local_time(record.time)
        if isinstance(record, NoteRecord):
            first, *rest = record.text.splitlines() or [""]
            return f"{stamp} ## {first}\n" + "".join(f"{stamp} ## {line}\n" for line in rest)
        if isinstance(record, CountRecord):
            lines = [f"{stamp} ## calls in the last {record.period:.1f}s:\n"]
            for path, (calls, failed) in record.counts.items():
                extra = f" ({failed} failed)" if failed else ""
                lines.append(f"{BODY_INDENT}{_label(path)}: {calls}{extra}\n")
            return "".join(lines)
        if isinstance(record, DropRecord):
            return (f"{stamp} !! dump queue full: {record.dropped} messages dropped "
                    f"({record.total} in total)\n")
        raise TypeError(f"not a dump record: {record!r}")

    def _call(self, r: CallRecord) -> str:
        arrow = "=>" if r.direction == REQUEST else "<="
        head = f"{_local_time(r.time)} {arrow} #{r.call_id} {_label(r.path)}"
        if r.qualifier:
            head += f" [{r.qualifier}]"
        if r.latency is not None:
            head += " " + _latency(r.latency)
        if r.failed:
            head += f" ERROR {r.code}: {r.details}"
        elif r.direction == REPLY and r.raw_size is None:
            head += " (end of call)"
        text = head + "\n"
        if r.level is Level.FULL:
            summary = _body_summary(r)
            if summary is not None:
                text += BODY_INDENT + summary + "\n"
            elif r.message is not None:
                body = message_to_plain(r.message)
                if body:
                    if self.redact:
                        redact_envs(body)
                    text += to_yaml(body, indent=len(BODY_INDENT))
        return text


def _label(path: str) -> str:
    """Short method name for runtime.v1; other services keep their package visible."""
    service, _, name = path.lstrip("/").rpartition("/")
    if service in ("runtime.v1.RuntimeService", "runtime.v1.ImageService"):
        return name
    if service.startswith("runtime.") and service.count(".") == 2:
        return f"{service.split('.')[1]}/{name}"  # "v1alpha2/CreateContainer"
    return path


# -- JSON lines ----------------------------------------------------------------------


def _utc_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="microseconds")


class JsonlFormat:
    """One JSON object per line; every call object has the same keys."""

    def __init__(self, redact: bool = True) -> None:
        self.redact = redact

    def __call__(self, record: Record) -> str:
        return "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in self.objects(record))

    def objects(self, record: Record) -> list[dict[str, Any]]:
        if isinstance(record, CallRecord):
            return [self._call(record)]
        stamp = _utc_time(record.time)
        if isinstance(record, NoteRecord):
            return [{"time": stamp, "direction": "note", "text": record.text}]
        if isinstance(record, CountRecord):
            objs = []
            for path, (calls, failed) in record.counts.items():
                service, _, method = path.lstrip("/").rpartition("/")
                objs.append({"time": stamp, "direction": "count", "service": service, "method": method,
                             "count": calls, "failed": failed, "period": record.period})
            return objs
        if isinstance(record, DropRecord):
            return [{"time": stamp, "direction": "dropped", "dropped": record.dropped, "total": record.total}]
        raise TypeError(f"not a dump record: {record!r}")

    def _call(self, r: CallRecord) -> dict[str, Any]:
        return {
            "time": _utc_time(r.time),
            "direction": r.direction,
            "service": r.service,
            "method": r.method,
            "call_id": r.call_id,
            "qualifier": r.qualifier or None,
            "latency": r.latency,
            "code": r.code,
            "details": r.details or None,
            "body": self._body(r),
        }

    def _body(self, r: CallRecord) -> Any:
        if r.level is not Level.FULL or r.raw_size is None:
            return None
        if r.message is None:
            body: dict[str, Any] = {"raw_bytes": r.raw_size}
            if r.decode_error:
                body["decode_error"] = r.decode_error
            return body
        body = json_format.MessageToDict(r.message, preserving_proto_field_name=True)
        return redact_envs(body) if self.redact else body


FORMATS: dict[str, Callable[..., Formatter]] = {
    "human": HumanFormat,
    "jsonl": JsonlFormat,
}
