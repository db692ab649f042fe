"""JSONPatch (RFC 6902) operations that set one annotation on an object."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def escape_pointer_token(token: str) -> str:
    """Escapes one JSON Pointer (RFC 6901) reference token."""
    return token.replace("~", "~0").replace("/", "~1")


def set_annotation_patch(obj: Mapping[str, Any], key: str, value: str) -> list[dict[str, Any]]:
    """Returns the operations that make obj.metadata.annotations[key] == value,
    whatever annotations (or metadata) the object has now."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": {key: value}}}]
    annotations = metadata.get("annotations")
    if not isinstance(annotations, Mapping):
        # "add" on an existing member replaces it, which covers an explicit
        # `annotations: null` too.
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    op = "replace" if key in annotations else "add"
    return [{"op": op, "path": "/metadata/annotations/" + escape_pointer_token(key), "value": value}]
