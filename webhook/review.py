"""Turns an admission.k8s.io/v1 AdmissionReview request into its response.

Only a malformed review is an error (HTTP 400). Everything else is allowed:
a pod gets a patch when one can be made; when it cannot, the pod is still
allowed and the response's warnings say why, because this webhook must never
be the reason a pod is not created.
"""
from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .annotation import ANNOTATION_KEY, resources_annotation
from .patch import set_annotation_patch

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"

# The API server keeps warnings short; a longer one would be truncated there.
MAX_WARNING_CHARS = 256

PodPatcher = Callable[[Mapping[str, Any]], list[dict[str, Any]]]


class MalformedReview(ValueError):
    """The body is not an admission.k8s.io/v1 AdmissionReview request."""


@dataclass(frozen=True)
class ReviewResult:
    """The response to send and what the log line says about it."""

    response: dict[str, Any]
    subject: str
    patched: bool
    reason: str
    warnings: list[str] = field(default_factory=list)

    def log_line(self) -> str:
        uid = self.response["response"]["uid"]
        outcome = "patched" if self.patched else f"not patched: {self.reason}"
        return f"review {uid} {self.subject}: {outcome}"


def annotate_resources(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The webhook's patch: sets the resources annotation on the pod."""
    return set_annotation_patch(pod, ANNOTATION_KEY, resources_annotation(pod))


def review(body: Any, patch_pod: PodPatcher = annotate_resources) -> ReviewResult:
    """Answers one decoded AdmissionReview; raises MalformedReview only."""
    request = _request_of(body)
    uid = request["uid"]
    subject = _subject(request)
    try:
        kind = request.get("kind")
        if not _is_pod(kind):
            return _allowed(uid, subject, f"not a pod ({_kind_name(kind)})")
        operation = request.get("operation")
        if operation != "CREATE":
            return _allowed(uid, subject, f"operation {operation!r} is not CREATE")
        pod = request.get("object")
        if not isinstance(pod, Mapping):
            raise ValueError("request.object is not a pod object")
        ops = patch_pod(pod)
        patch = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
    except Exception as err:  # noqa: BLE001 - any fault of ours must not block the pod
        reason = f"{type(err).__name__}: {err}" if not isinstance(err, ValueError) else str(err)
        warning = f"cri-resmgr webhook did not set {ANNOTATION_KEY}: {reason}"
        return _allowed(uid, subject, reason, warnings=[warning[:MAX_WARNING_CHARS]])
    response = _response(uid)
    response["response"].update(patchType="JSONPatch", patch=patch)
    return ReviewResult(response, subject, True, "patched")


def _request_of(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise MalformedReview(f"AdmissionReview must be a JSON object, got {_json_type(body)}")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version != ADMISSION_API_VERSION or kind != ADMISSION_KIND:
        raise MalformedReview(
            f"expected apiVersion {ADMISSION_API_VERSION!r} kind {ADMISSION_KIND!r}, "
            f"got apiVersion {api_version!r} kind {kind!r}"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise MalformedReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise MalformedReview("AdmissionReview request has no uid")
    return request


def _is_pod(kind: Any) -> bool:
    return isinstance(kind, Mapping) and kind.get("group", "") == "" and kind.get("kind") == "Pod"


def _kind_name(kind: Any) -> str:
    if not isinstance(kind, Mapping):
        return "no request.kind"
    group = kind.get("group") or ""
    version = kind.get("version") or ""
    return f"{group + '/' if group else ''}{version}, Kind={kind.get('kind')}"


def _subject(request: Mapping[str, Any]) -> str:
    """namespace/name for the log; a pod created from generateName has no
    name yet, so its prefix stands in, marked with '*'."""
    obj = request.get("object")
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace = request.get("namespace") or metadata.get("namespace") or ""
    name = request.get("name") or metadata.get("name")
    if not name:
        name = f"{metadata.get('generateName') or ''}*"
    return f"{namespace}/{name}" if namespace else str(name)


def _response(uid: str) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": ADMISSION_KIND,
        "response": {"uid": uid, "allowed": True},
    }


def _allowed(uid: str, subject: str, reason: str, warnings: list[str] | None = None) -> ReviewResult:
    response = _response(uid)
    if warnings:
        response["response"]["warnings"] = list(warnings)
    return ReviewResult(response, subject, False, reason, list(warnings or []))


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
