"""Changes to the agent's own Node, on behalf of the relay.

Labels and annotations go in one JSON merge patch. Taints are a list that
Kubernetes replaces as a whole, so changing them is read-modify-write guarded
by the Node's resourceVersion, retried when someone else wrote in between.
Extended resources live in the Node's status, patched through its status
subresource.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cri_resmgr.errors import CriResmgrError
from cri_resmgr_agent.kube import body

MERGE_PATCH = "application/merge-patch+json"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_CONFLICT_RETRIES = 5


class NodeOpError(CriResmgrError, ValueError):
    """The request itself is wrong (bad taint, empty name, ...)."""


@dataclass(frozen=True)
class TaintSpec:
    key: str
    value: str = ""
    effect: str = ""


@dataclass
class NodeChange:
    set_labels: Mapping[str, str] = field(default_factory=dict)
    remove_labels: Iterable[str] = ()
    set_annotations: Mapping[str, str] = field(default_factory=dict)
    remove_annotations: Iterable[str] = ()
    set_taints: Iterable[TaintSpec] = ()
    remove_taints: Iterable[TaintSpec] = ()  # effect "" matches any effect


class NodeOps:
    def __init__(self, core: client.CoreV1Api, node_name: str, request_timeout: float = 30.0) -> None:
        self._core = core
        self._node_name = node_name
        self._timeout = request_timeout

    def get_node(self) -> bytes:
        return body(self._core.read_node(self._node_name, _preload_content=False, _request_timeout=self._timeout))

    def patch_node(self, change: NodeChange) -> bytes:
        metadata = _map_patch("label", change.set_labels, change.remove_labels)
        annotations = _map_patch("annotation", change.set_annotations, change.remove_annotations)
        patch: dict[str, Any] = {"metadata": {}}
        if metadata:
            patch["metadata"]["labels"] = metadata
        if annotations:
            patch["metadata"]["annotations"] = annotations
        set_taints, remove_taints = list(change.set_taints), list(change.remove_taints)
        for taint in set_taints:
            if not taint.key or taint.effect not in TAINT_EFFECTS:
                raise NodeOpError(f"invalid taint {taint.key!r}={taint.value!r}:{taint.effect!r}: "
                                  f"needs a key and an effect among {', '.join(TAINT_EFFECTS)}")
        for taint in remove_taints:
            if not taint.key or (taint.effect and taint.effect not in TAINT_EFFECTS):
                raise NodeOpError(f"invalid taint to remove {taint.key!r}:{taint.effect!r}")
        if not set_taints and not remove_taints:
            return self._patch(patch)
        for attempt in range(_CONFLICT_RETRIES):
            node = json.loads(self.get_node())
            taints = _changed_taints((node.get("spec") or {}).get("taints") or [], set_taints, remove_taints)
            guarded = dict(patch, metadata=dict(patch["metadata"],
                                                resourceVersion=node["metadata"]["resourceVersion"]),
                           spec={"taints": taints})
            try:
                return self._patch(guarded)
            except ApiException as exc:
                if exc.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def update_capacity(self, set_capacity: Mapping[str, str], remove_capacity: Iterable[str]) -> bytes:
        capacity: dict[str, str | None] = {}
        for name, quantity in set_capacity.items():
            _check_extended_resource(name)
            if not quantity:
                raise NodeOpError(f"no quantity given for resource {name!r}")
            capacity[name] = quantity
        for name in remove_capacity:
            _check_extended_resource(name)
            capacity[name] = None
        return body(self._core.patch_node_status(self._node_name, {"status": {"capacity": capacity}},
                                                 _content_type=MERGE_PATCH, _preload_content=False,
                                                 _request_timeout=self._timeout))

    def _patch(self, patch: dict[str, Any]) -> bytes:
        return body(self._core.patch_node(self._node_name, patch, _content_type=MERGE_PATCH,
                                          _preload_content=False, _request_timeout=self._timeout))


def _map_patch(what: str, set_: Mapping[str, str], remove: Iterable[str]) -> dict[str, str | None]:
    patch: dict[str, str | None] = {}
    for key, value in set_.items():
        if not key:
            raise NodeOpError(f"empty {what} name")
        patch[key] = value
    for key in remove:
        if key in patch:
            raise NodeOpError(f"{what} {key!r} is both set and removed")
        patch[key] = None
    return patch


def _changed_taints(current: list[dict[str, Any]], set_taints: list[TaintSpec],
                    remove_taints: list[TaintSpec]) -> list[dict[str, Any]]:
    def removed(t: dict[str, Any]) -> bool:
        return any(t.get("key") == r.key and (not r.effect or t.get("effect") == r.effect) for r in remove_taints)

    def replaced(t: dict[str, Any]) -> bool:
        return any(t.get("key") == s.key and t.get("effect") == s.effect for s in set_taints)

    kept = [t for t in current if not removed(t) and not replaced(t)]
    added = [{"key": s.key, "effect": s.effect, **({"value": s.value} if s.value else {})} for s in set_taints]
    return kept + added


def _check_extended_resource(name: str) -> None:
    # Only extended resources (domain-qualified, outside kubernetes.io) may be advertised this way.
    if "/" not in name or name.split("/", 1)[0].endswith("kubernetes.io"):
        raise NodeOpError(f"{name!r} is not an extended resource name (want e.g. example.com/foo)")
