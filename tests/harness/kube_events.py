"""Events as the real API server takes them: validation on create, and the two API views.

The rules are those of kubernetes' pkg/apis/core/validation/events.go
(ValidateEventCreate), applied, as the API server applies them, to the internal Event
(core/v1's field names) whichever API the Event came through:

* every Event passes the legacy checks. Without eventTime, an Event about a
  cluster-scoped object (involvedObject.namespace empty) lives in "default" (or no
  namespace), and one about a namespaced object in that object's namespace. With
  eventTime, one about a cluster-scoped object may live in "default" or "kube-system",
  and reportingController (a qualified name), reportingInstance, action and reason are
  required, each at most 128 characters, the message at most 1024;
* through events.k8s.io/v1 also: a DNS-subdomain name, eventTime required, type Normal
  or Warning, the deprecated fields (source, first/last timestamp, count) unset, and a
  series of at least 2 with its lastObservedTime.

A refusal is 422 Invalid with the Status body the real server sends: the message
`Event "<name>" is invalid: <field>: <detail>` (several errors in brackets, joined by
", "), details.causes one per field error. Both views are stored as the core/v1 object,
as the real server stores one Event for both APIs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

EVENTS_GROUP = "events.k8s.io"
_REPORTING_INSTANCE_MAX = _ACTION_MAX = _REASON_MAX = 128
_NOTE_MAX = 1024
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_TEXT = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                   "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                   "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_SUBDOMAIN_TEXT = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                   "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
                   "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")

# events.k8s.io/v1 field -> core/v1 field, for the fields whose names differ (core/v1 calls
# the internal ReportingController "reportingComponent"; errors use the internal names).
_V1_TO_CORE = {"regarding": "involvedObject", "note": "message", "deprecatedSource": "source",
               "deprecatedFirstTimestamp": "firstTimestamp", "deprecatedLastTimestamp": "lastTimestamp",
               "deprecatedCount": "count", "reportingController": "reportingComponent"}
_CORE_TO_V1 = {core: v1 for v1, core in _V1_TO_CORE.items()}


@dataclass(frozen=True)
class FieldError:
    """One of apimachinery's field.Error: its type decides the wording and the cause's reason."""
    type: str  # "Invalid" or "Required"
    field: str
    value: Any = ""
    detail: str = ""

    def body(self) -> str:
        if self.type == "Required":
            text = "Required value"
        else:
            text = f"Invalid value: {json.dumps(self.value) if isinstance(self.value, str) else self.value}"
        return f"{text}: {self.detail}" if self.detail else text

    def cause(self) -> dict[str, str]:
        return {"reason": f"FieldValue{self.type}", "message": self.body(), "field": self.field}


def invalid_status(group: str, name: str, errors: list[FieldError]) -> dict[str, Any]:
    """The 422 Status body of errors.NewInvalid for an Event."""
    kind = f"Event.{group}" if group else "Event"
    texts = [f"{e.field}: {e.body()}" for e in errors]
    aggregate = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {"name": name, "kind": "Event", "causes": [e.cause() for e in errors]}
    if group:
        details["group"] = group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{kind} "{name}" is invalid: {aggregate}', "reason": "Invalid",
            "details": details, "code": 422}


def v1_to_core(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event in core/v1's shape (the internal Event's field names)."""
    core = {_V1_TO_CORE.get(key, key): value for key, value in event.items()}
    core["apiVersion"], core["kind"] = "v1", "Event"
    return core


def core_to_v1(event: dict[str, Any]) -> dict[str, Any]:
    v1 = {_CORE_TO_V1.get(key, key): value for key, value in event.items()}
    v1["apiVersion"], v1["kind"] = f"{EVENTS_GROUP}/v1", "Event"
    return v1


def _set(value: Any) -> bool:
    return value not in (None, "", 0, {})


def _subdomain_errors(value: str) -> list[str]:
    """validation.IsDNS1123Subdomain."""
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS_SUBDOMAIN.fullmatch(value):
        errors.append(_SUBDOMAIN_TEXT)
    return errors


def _qualified_name_errors(value: str) -> list[str]:
    """validation.IsQualifiedName: an optional DNS-subdomain prefix and '/', then a name of 63 at most."""
    parts = value.split("/")
    if len(parts) > 2:
        return [f"a qualified name {_QUALIFIED_TEXT} with an optional DNS subdomain prefix and '/' "
                f"(e.g. 'example.com/MyName')"]
    errors = []
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {msg}" for msg in _subdomain_errors(parts[0])]
    name = parts[-1]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        errors.append(f"name part {_QUALIFIED_TEXT}")
    return errors


def _legacy_errors(event: dict[str, Any], namespace: str) -> list[FieldError]:
    errors: list[FieldError] = []
    involved_ns = (event.get("involvedObject") or {}).get("namespace") or ""
    mismatch = FieldError("Invalid", "involvedObject.namespace", involved_ns, "does not match event.namespace")
    if not _set(event.get("eventTime")):
        if (namespace not in ("", "default")) if not involved_ns else namespace != involved_ns:
            errors.append(mismatch)
        return errors
    if not involved_ns and namespace not in ("default", "kube-system"):
        errors.append(mismatch)
    controller = event.get("reportingComponent") or ""  # the internal ReportingController
    if not controller:
        errors.append(FieldError("Required", "reportingController"))
    errors += [FieldError("Invalid", "reportingController", controller, msg)
               for msg in _qualified_name_errors(controller)]
    for field, limit in (("reportingInstance", _REPORTING_INSTANCE_MAX), ("action", _ACTION_MAX),
                         ("reason", _REASON_MAX)):
        value = event.get(field) or ""
        if not value:
            errors.append(FieldError("Required", field))
        if len(value) > limit:
            errors.append(FieldError("Invalid", field, "", f"can have at most {limit} characters"))
    if len(event.get("message") or "") > _NOTE_MAX:
        errors.append(FieldError("Invalid", "message", "", f"can have at most {_NOTE_MAX} characters"))
    return errors


def _strict_errors(event: dict[str, Any], name: str) -> list[FieldError]:
    """What events.k8s.io/v1 adds to the legacy checks."""
    errors: list[FieldError] = []
    errors += [FieldError("Invalid", "metadata.name", name, msg) for msg in _subdomain_errors(name)]
    series = event.get("series")
    if series is not None:
        if (series.get("count") or 0) < 2:
            errors.append(FieldError("Invalid", "series.count", "", "should be at least 2"))
        if not _set(series.get("lastObservedTime")):
            errors.append(FieldError("Required", "series.lastObservedTime"))
    if not _set(event.get("eventTime")):
        errors.append(FieldError("Required", "eventTime"))
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(FieldError("Invalid", "type", "", f"has invalid value: {event.get('type') or ''}"))
    for field in ("firstTimestamp", "lastTimestamp", "count"):
        if _set(event.get(field)):
            errors.append(FieldError("Invalid", field, "", "needs to be unset"))
    source = event.get("source") or {}
    if source.get("component") or source.get("host"):
        errors.append(FieldError("Invalid", "source", "", "needs to be unset"))
    return errors


def validate_event_create(event: dict[str, Any], namespace: str, group: str) -> list[FieldError]:
    """ValidateEventCreate on `event` in core/v1's shape, posted through `group` ("" or events.k8s.io)."""
    errors = _legacy_errors(event, namespace)
    if group == EVENTS_GROUP:
        errors += _strict_errors(event, (event.get("metadata") or {}).get("name") or "")
    return errors
