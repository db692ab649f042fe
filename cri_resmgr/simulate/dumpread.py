"""The calls of a jsonl dump (`-dump-format jsonl`, docs/dump.md), requests paired with replies.

Bodies are decoded with runtime.v1 classes (v1alpha2 is wire-identical). Calls are
in the order of their requests; a reply is found by call id. What cannot be used is
an error naming the file and line: a line that is not a JSON object (a truncated
last line, say), a method the CRI table does not know, a lifecycle call recorded
without its body (dumped at name level). Notes, counts and drop reports are skipped;
so are calls of known methods with no body that no policy needs (Version, images).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from cri_resmgr.bounded import MAX_DEPTH, InputError, check_depth, clip, parse_json, short
from cri_resmgr.simulate.calls import Call, WorkloadError
from cri_resmgr.simulate.inputs import read_lines
from cri_resmgr.transport.methods import MethodTable

__all__ = ["Recording", "read_dump", "parse_dump", "NEEDS_BODY"]

# Without their bodies a recording cannot say which pod or container these are about.
NEEDS_BODY = frozenset({"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "CreateContainer",
                        "StartContainer", "StopContainer", "RemoveContainer", "UpdateContainerResources"})
# Replies whose bodies carry what later calls refer to (ids) or what the engine reads (states).
NEEDS_REPLY_BODY = frozenset({"RunPodSandbox", "CreateContainer"})


@dataclass
class Recording:
    calls: list[Call]
    skipped: dict[str, int] = field(default_factory=dict)  # method -> calls left out (no body)
    unanswered: int = 0  # requests whose reply the dump does not hold (cut short)


@dataclass
class _Open:
    line: int
    service: str
    method: str
    request: Message
    time: float | None


def read_dump(path: str) -> Recording:
    """The dump's calls; a line is read at a bounded cost (inputs.py: its length, UTF-8)."""
    return parse_dump(read_lines(path, "dump"), path)


def parse_dump(lines: Iterable[str], source: str) -> Recording:
    table = MethodTable()
    rec = Recording(calls=[])
    open_calls: dict[int, _Open] = {}
    order: list[_Open | Call] = []  # requests in order; replaced by their calls when answered
    index: dict[int, int] = {}  # call id -> position in order
    start: float | None = None
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        where = f"{source}:{n}"
        obj = _object(text, where)
        direction = obj.get("direction")
        if direction not in ("request", "reply"):
            if direction in ("note", "count", "dropped"):
                continue
            raise WorkloadError(f"{where}: direction {short(direction)} is not a dump record's (request, reply, "
                                "note, count, dropped): not a cri-resmgr jsonl dump")
        service, method = _str(obj, "service", where), _str(obj, "method", where)
        m = table.lookup(f"/{service}/{method}")
        if m is None:
            raise WorkloadError(f"{where}: unknown CRI method {clip(service, 60)}/{clip(method, 60)}")
        # The engine reads runtime.v1 classes; v1alpha2 is the same messages under another name.
        m = table.lookup(f"/runtime.v1.{service.rpartition('.')[2]}/{method}") or m
        call_id = obj.get("call_id")
        if not isinstance(call_id, int):
            raise WorkloadError(f"{where}: call_id: expected an integer, got {short(call_id)}")
        t = _time(obj, where)
        if start is None and t is not None:
            start = t
        rel = t - start if t is not None and start is not None else None
        body = obj.get("body")
        if direction == "request":
            if body is None:
                if method in NEEDS_BODY:
                    raise WorkloadError(f"{where}: {method} request recorded without its body; record with "
                                        "-dump 'full:...' (docs/dump.md)")
                rec.skipped[method] = rec.skipped.get(method, 0) + 1
                continue
            request = _message(m.request, body, where, method)
            pending = _Open(n, service, method, request, rel)
            open_calls[call_id] = pending
            index[call_id] = len(order)
            order.append(pending)
            continue
        req = open_calls.pop(call_id, None)
        if req is None:
            continue  # the reply of a call whose request was not dumped, or was skipped
        code = obj.get("code") or "OK"
        if not isinstance(code, str) or len(code) > 40:
            raise WorkloadError(f"{where}: code: expected a gRPC status name, got {short(code)}")
        reply = None
        if code == "OK":
            if body is None and req.method in NEEDS_REPLY_BODY:
                raise WorkloadError(f"{where}: {req.method} reply recorded without its body (the id it gives)")
            reply = _message(m.response, body, where, method) if body is not None else m.response()
        details = clip(str(obj.get("details") or ""), 1000)
        order[index.pop(call_id)] = Call(req.method, req.request, reply, f"{source}:{req.line}", service=req.service,
                                         code=code, details=details, time=req.time)
    for item in order:
        if isinstance(item, Call):
            rec.calls.append(item)
        else:
            rec.unanswered += 1
            rec.calls.append(Call(item.method, item.request, None, f"{source}:{item.line}", service=item.service,
                                  code="UNKNOWN", details="no reply in the dump", time=item.time))
    return rec


def _object(text: str, where: str) -> Mapping[str, Any]:
    try:
        obj = parse_json(text)
        check_depth(obj, MAX_DEPTH, where)  # what the protobuf parser walks with recursion
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{where}: not a JSON object ({e.msg} at column {e.colno}): a truncated line, or "
                            "not a jsonl dump (-dump-format jsonl)") from None
    except RecursionError:
        raise WorkloadError(f"{where}: nested deeper than {MAX_DEPTH} levels: not a dump record") from None
    except InputError as e:
        raise WorkloadError(f"{e}: not a dump record") from None
    except ValueError as e:  # an integer past Python's digit limit
        raise WorkloadError(f"{where}: not usable JSON: {clip(str(e), 80)}") from None
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise WorkloadError(f"{where}: {key}: expected a string, got {short(value)}")
    return value


def _time(obj: Mapping[str, Any], where: str) -> float | None:
    value = obj.get("time")
    if value is None:
        return None
    if not isinstance(value, str):
        raise WorkloadError(f"{where}: time: {short(value)} is not an ISO 8601 time")
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise WorkloadError(f"{where}: time: {short(value)} is not an ISO 8601 time") from None


def _message(cls: type[Message], body: Any, where: str, method: str) -> Message:
    if not isinstance(body, dict):
        raise WorkloadError(f"{where}: {method}: body: expected an object, got {type(body).__name__}")
    if "raw_bytes" in body and len(body) <= 2:
        raise WorkloadError(f"{where}: {method}: the relay could not decode this message "
                            f"({clip(str(body.get('decode_error') or 'no decoder'), 100)}); it cannot be simulated")
    try:
        return json_format.ParseDict(body, cls(), ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise WorkloadError(f"{where}: {method}: body does not fit {cls.__name__}: {clip(str(e), 160)}") from None
