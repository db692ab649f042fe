"""Which block I/O and RDT class a container gets: a decision without I/O.

The pod's annotations (kubelet passes the pod's in the sandbox config; Kubernetes has
no container annotations), in the order of the other cri-resource-manager annotations:
`KIND.cri-resource-manager.intel.com/container.NAME`, then `.../pod`; else the class
the configuration gives the container's QoS class; else none.
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


def annotation_keys(kind: str, container: str) -> tuple[str, str]:
    base = f"{kind}class.{DOMAIN}"
    return f"{base}/container.{container}", f"{base}/pod"


def choose(kind: str, container: str, qos: str, pod_annotations: Mapping[str, str],
           container_annotations: Mapping[str, str], known: Collection[str],
           qos_classes: Mapping[str, str]) -> Choice:
    """The class of `kind` ("blockio", "rdt") for a container; an annotation naming a class
    the configuration does not have gives none (and says so in `unknown`): a class asked
    for by name is not silently replaced by another."""
    for key in annotation_keys(kind, container):
        for source in (container_annotations, pod_annotations):
            value = source.get(key)
            if value is None:
                continue
            name = value.strip()
            if name in known:
                return Choice(name, "annotation")
            return Choice(None, "annotation", unknown=name)
    default = qos_classes.get(qos)
    if default is not None and default in known:
        return Choice(default, "qos")
    return Choice(None)
