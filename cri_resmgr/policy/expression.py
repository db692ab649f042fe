"""The label-selector style expressions policies match containers with.

Used by the topology-aware policy's affinity annotations and by the balloons
policy's MatchExpressions. An expression is a mapping::

    {key: app, operator: In, values: [db, cache]}

Keys name a property of the container:

    name, namespace, pod (also pod/name), qosclass   the container's own
    labels/KEY                                        a label (pod labels, container's over them)
    KEY (any other)                                   shorthand for labels/KEY

Operators: Equals, NotEqual (one value); In, NotIn (any number of values);
Exists, NotExist (no values; NotExist also accepts "DoesNotExist"); Matches,
MatchesNot (one shell glob); MatchesAny, MatchesNone (globs); AlwaysTrue (no key
needed). An absent key has no value: Equals/In/Matches/MatchesAny are false for
it, NotEqual/NotIn/MatchesNot/MatchesNone true. `parse()` raises ExpressionError
naming the offending field, so a configuration or annotation mistake is reported
instead of silently matching nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cri_resmgr.bounded import short
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.policy.api import Workload

__all__ = ["Expression", "ExpressionError", "parse", "parse_list", "resolve"]


class ExpressionError(CriResmgrError, ValueError):
    """An expression is malformed; the message names where."""


_Test = Callable[[str | None, tuple[str, ...]], bool]

# operator -> (number of values: exact count, or None for one or more; or -1 for any), test
_OPERATORS: dict[str, tuple[int | None, _Test]] = {
    "Equals": (1, lambda v, vals: v == vals[0]),
    "NotEqual": (1, lambda v, vals: v != vals[0]),
    "In": (None, lambda v, vals: v in vals),
    "NotIn": (None, lambda v, vals: v not in vals),
    "Exists": (0, lambda v, vals: v is not None),
    "NotExist": (0, lambda v, vals: v is None),
    "Matches": (1, lambda v, vals: v is not None and fnmatch.fnmatchcase(v, vals[0])),
    "MatchesNot": (1, lambda v, vals: v is None or not fnmatch.fnmatchcase(v, vals[0])),
    "MatchesAny": (None, lambda v, vals: v is not None and any(fnmatch.fnmatchcase(v, p) for p in vals)),
    "MatchesNone": (None, lambda v, vals: v is None or not any(fnmatch.fnmatchcase(v, p) for p in vals)),
    "AlwaysTrue": (-1, lambda v, vals: True),
}
_ALIASES = {"DoesNotExist": "NotExist", "NotEquals": "NotEqual", "Equal": "Equals"}


@dataclass(frozen=True)
class Expression:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def evaluate(self, w: Workload) -> bool:
        return _OPERATORS[self.operator][1](resolve(w, self.key), self.values)

    def __str__(self) -> str:
        if self.operator == "AlwaysTrue":
            return "AlwaysTrue"
        return f"{self.key} {self.operator} {list(self.values)}" if self.values else f"{self.key} {self.operator}"

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "operator": self.operator, "values": list(self.values)}


def resolve(w: Workload, key: str) -> str | None:
    """The value `key` names for the container; None when it has none."""
    if key == "name":
        return w.name
    if key == "namespace":
        return w.namespace
    if key in ("pod", "pod/name"):
        return w.pod
    if key == "qosclass":
        return w.qos.value
    if key.startswith("labels/"):
        key = key[len("labels/"):]
    return w.labels.get(key)


def parse(data: Any, where: str = "expression") -> Expression:
    """One expression from its mapping form; raises ExpressionError naming `where`."""
    if not isinstance(data, Mapping):
        raise ExpressionError(f"{where}: expected a mapping with key, operator and values, got {short(data)}")
    unknown = sorted(set(map(str, data)) - {"key", "operator", "values", "op"})
    if unknown:
        raise ExpressionError(f"{where}: unknown field {short(unknown[0])} (known: key, operator, values)")
    op = data.get("operator", data.get("op"))
    if not isinstance(op, str) or not op:
        raise ExpressionError(f"{where}.operator: missing (one of {', '.join(_OPERATORS)})")
    op = _ALIASES.get(op, op)
    if op not in _OPERATORS:
        raise ExpressionError(f"{where}.operator: unknown operator {short(op)} (one of {', '.join(_OPERATORS)})")
    key = data.get("key", "")
    if op != "AlwaysTrue" and (not isinstance(key, str) or not key):
        raise ExpressionError(f"{where}.key: missing (a label name, or name, namespace, pod, qosclass)")
    raw = data.get("values")
    if raw is None:
        values: tuple[str, ...] = ()
    elif isinstance(raw, str | int | float | bool):
        values = (_text(raw, where),)
    elif isinstance(raw, Sequence):
        values = tuple(_text(v, where) for v in raw)
    else:
        raise ExpressionError(f"{where}.values: expected a list of strings, got {short(raw)}")
    want = _OPERATORS[op][0]
    if want is None and not values:
        raise ExpressionError(f"{where}.values: operator {op} needs at least one value")
    if want is not None and want >= 0 and len(values) != want:
        raise ExpressionError(f"{where}.values: operator {op} takes {want} value(s), got {len(values)}")
    return Expression(key=str(key or ""), operator=op, values=values)


def parse_list(data: Any, where: str = "expressions") -> tuple[Expression, ...]:
    """A list of expressions (all must hold); a single mapping is a list of one."""
    if data is None:
        return ()
    if isinstance(data, Mapping):
        return (parse(data, where),)
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise ExpressionError(f"{where}: expected a list of expressions, got {short(data)}")
    return tuple(parse(item, f"{where}[{i}]") for i, item in enumerate(data))


def _text(v: Any, where: str) -> str:
    # YAML turns `values: [true, 1]` into non-strings; labels are strings.
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str | int | float):
        return str(v)
    raise ExpressionError(f"{where}.values: {short(v)} is not a string")
