"""Which block I/O and RDT class a container gets: a decision without I/O.

The pod's annotations (kubelet passes the pod's in the sandbox config; Kubernetes has
no container annotations) `KIND.cri-resource-manager.intel.com/container.NAME`, then
`.../pod` (then the plain key), in the order of every cri-resource-manager annotation
(`policy.api.annotation_keys`, which `Workload.effective_annotation` follows); else the
class the configuration gives the container's QoS class; else none.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

DOMAIN = "cri-resource-manager.intel.com"
KINDS = ("blockio", "rdt")


@dataclass(frozen=True)
class Choice:
    """A kind's class for one container: `name` (None: none), where it came from
    ("annotation", "qos", "none"), and the unknown class an annotation asked for."""

    name: str | None
    source: str = "none"
    unknown: str | None = None


def annotation_key(kind: str) -> str:
    """The annotation naming a container's class of `kind` ("blockio", "rdt")."""
    return f"{kind}class.{DOMAIN}"


def choose(annotation: str | None, qos: str, known: Collection[str], qos_classes: Mapping[str, str]) -> Choice:
    """A container's class of a kind, from its effective annotation (`annotation`, None:
    not given) and QoS class. An annotation naming a class the configuration does not
    have gives none (and says so in `unknown`): a class asked for by name is not
    silently replaced by another."""
    if annotation is not None:
        name = annotation.strip()
        if name in known:
            return Choice(name, "annotation")
        return Choice(None, "annotation", unknown=name)
    default = qos_classes.get(qos)
    if default is not None and default in known:
        return Choice(default, "qos")
    return Choice(None)
