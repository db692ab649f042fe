"""Which ConfigMap configures a node: its own, else its group's, else the default.

The chosen map replaces the others entirely; nothing is merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConfigMapNames:
    base: str

    def node(self, node_name: str) -> str:
        return f"{self.base}.node.{node_name}"

    def group(self, group: str) -> str:
        return f"{self.base}.group.{group}"

    @property
    def default(self) -> str:
        return f"{self.base}.default"

    def is_candidate(self, name: str, node_name: str) -> bool:
        """Could this map ever configure `node_name` (whatever its group)?"""
        return name in (self.node(node_name), self.default) or name.startswith(f"{self.base}.group.")


@dataclass(frozen=True)
class ConfigMapData:
    name: str
    resource_version: str
    data: Mapping[str, str]


@dataclass(frozen=True)
class Selection:
    """The configuration a node should run: `configmap` is None when no map applies."""

    configmap: str | None
    resource_version: str = ""
    data: Mapping[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        return f"configmap {self.configmap}" if self.configmap else "no configmap"


def select_config(names: ConfigMapNames, node_name: str, group: str | None,
                  configmaps: Mapping[str, ConfigMapData]) -> Selection:
    """The highest-precedence map among `configmaps` (keyed by name) for the node."""
    candidates = [names.node(node_name)]
    if group:
        candidates.append(names.group(group))
    candidates.append(names.default)
    for name in candidates:
        cm = configmaps.get(name)
        if cm is not None:
            return Selection(name, cm.resource_version, dict(cm.data))
    return Selection(None)


def node_group(labels: Mapping[str, str] | None, label_name: str) -> str | None:
    value = (labels or {}).get(label_name)
    return value or None
