"""A container's LinuxContainerResources as the dict the cache keeps and the state file
holds, and back: json_format's `MessageToDict(m, preserving_proto_field_name=True)` and
`ParseDict(d, m, ignore_unknown_fields=True)`, exactly, without json_format's per-field
machinery for the plain fields (integers and strings, which is all a container has but
for hugepage limits and cgroup v2 `unified` entries). A message or dict with anything
else, or a value that is not a plain one, goes through json_format itself, so that its
results and its errors are json_format's (issue 37: a first start converted each of
5000 containers' resources three times, some 20 us each)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from cri_resmgr._proto import runtime_v1_pb2 as pb

# json_format writes these as JSON strings (64-bit integers), the other integers as numbers.
_WIDE = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
         FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}
_NARROW = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_SINT32,
           FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32}


def _plain_fields() -> tuple[dict[str, bool], dict[str, bool]]:
    """LinuxContainerResources' integer fields (name -> 64-bit) and string fields."""
    ints: dict[str, bool] = {}
    strings: dict[str, bool] = {}
    for f in pb.LinuxContainerResources.DESCRIPTOR.fields:
        if f.type in _WIDE or f.type in _NARROW:
            ints[f.name] = f.type in _WIDE
        elif f.type == FieldDescriptor.TYPE_STRING:
            strings[f.name] = True
    return ints, strings


_INTS, _STRINGS = _plain_fields()


def to_dict(linux: pb.LinuxContainerResources) -> dict[str, Any]:
    """`json_format.MessageToDict(linux, preserving_proto_field_name=True)`."""
    out: dict[str, Any] = {}
    for f, value in linux.ListFields():  # the fields set, by number: json_format's order
        name = f.name
        wide = _INTS.get(name)
        if wide is not None:
            out[name] = str(value) if wide else value
        elif name in _STRINGS:
            out[name] = value
        else:  # hugepage limits, unified: json_format's own
            return json_format.MessageToDict(linux, preserving_proto_field_name=True)
    return out


def from_dict(data: dict[str, Any]) -> pb.LinuxContainerResources:
    """`json_format.ParseDict(data, LinuxContainerResources(), ignore_unknown_fields=True)`."""
    plain: dict[str, Any] = {}
    try:
        for name, value in data.items():
            kind = type(value)
            if name in _INTS and kind is int:
                plain[name] = value
            elif name in _INTS and kind is str and value.isascii() and value.removeprefix("-").isdigit():
                plain[name] = int(value)
            elif name in _STRINGS and kind is str:
                plain[name] = value
            else:  # another field, a name json_format would map or ignore, or another kind of value
                raise TypeError(name)
        return pb.LinuxContainerResources(**plain)
    except (TypeError, ValueError):  # json_format's result, or its error in its words
        return json_format.ParseDict(data, pb.LinuxContainerResources(), ignore_unknown_fields=True)
