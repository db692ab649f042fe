"""Builds the `intel.com/resources` annotation value from a pod object.

The CRI messages the relay sees carry only what the kubelet derived from a
container's resources (cgroup shares, quota, memory limit), not the requests
and limits themselves; this annotation carries them verbatim.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

ANNOTATION_KEY = "intel.com/resources"

# The annotation's top-level keys, in the order readers expect them; both are
# always present so a reader never has to tell "absent" from "empty".
CONTAINER_LISTS = ("initContainers", "containers")


class PodShapeError(ValueError):
    """The pod object does not have the shape the annotation needs."""


def resources_annotation(pod: Mapping[str, Any]) -> str:
    """Returns the annotation value: compact JSON of every container's
    requests and limits, quantities as the strings the pod spec holds."""
    return json.dumps(pod_resources(pod), separators=(",", ":"), sort_keys=True)


def pod_resources(pod: Mapping[str, Any]) -> dict[str, dict[str, dict[str, dict[str, str]]]]:
    """Returns {"initContainers": {NAME: {"requests": {...}, "limits": {...}}},
    "containers": {...}} for a pod object as the API server serializes it."""
    if not isinstance(pod, Mapping):
        raise PodShapeError(f"pod object is a {type(pod).__name__}, not an object")
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodShapeError("pod has no spec object")
    return {key: _containers_resources(spec.get(key), key) for key in CONTAINER_LISTS}


def _containers_resources(containers: Any, list_name: str) -> dict[str, dict[str, dict[str, str]]]:
    if containers is None:
        return {}
    if not isinstance(containers, list):
        raise PodShapeError(f"spec.{list_name} is a {type(containers).__name__}, not a list")
    result: dict[str, dict[str, dict[str, str]]] = {}
    for index, container in enumerate(containers):
        where = f"spec.{list_name}[{index}]"
        if not isinstance(container, Mapping):
            raise PodShapeError(f"{where} is a {type(container).__name__}, not an object")
        name = container.get("name")
        if not isinstance(name, str) or not name:
            raise PodShapeError(f"{where} has no name")
        if name in result:
            # Validation after admission rejects such a pod; an annotation
            # keyed by name could not describe it anyway.
            raise PodShapeError(f"{where}: duplicate container name {name!r}")
        result[name] = _container_resources(container.get("resources"), f"{where}.resources")
    return result


def _container_resources(resources: Any, where: str) -> dict[str, dict[str, str]]:
    if resources is None:
        resources = {}
    if not isinstance(resources, Mapping):
        raise PodShapeError(f"{where} is a {type(resources).__name__}, not an object")
    return {
        kind: _quantities(resources.get(kind), f"{where}.{kind}")
        for kind in ("requests", "limits")
    }


def _quantities(quantities: Any, where: str) -> dict[str, str]:
    if quantities is None:
        return {}
    if not isinstance(quantities, Mapping):
        raise PodShapeError(f"{where} is a {type(quantities).__name__}, not an object")
    return {str(name): _quantity_string(value, f"{where}.{name}") for name, value in quantities.items()}


def _quantity_string(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    # A hand-written object may carry a bare JSON number; its JSON spelling
    # is the quantity string the API server would have made of it.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return json.dumps(value)
    raise PodShapeError(f"{where} is a {type(value).__name__}, not a quantity")
