"""What the agent knows of the cluster, and the configuration that follows from it.

It holds the node's group and the candidate ConfigMaps, fed by the two
reflectors, and calls `on_selection` whenever the selected configuration
changes. Nothing is selected before both the Node and the ConfigMaps were
read once: a half-known cluster must not reconfigure the relay.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cri_resmgr_agent.reflector import Obj
from cri_resmgr_agent.selection import ConfigMapData, ConfigMapNames, Selection, node_group, select_config

log = logging.getLogger(__name__)


class ClusterView:
    def __init__(self, names: ConfigMapNames, node_name: str, label_name: str,
                 on_selection: Callable[[Selection], None]) -> None:
        self._names = names
        self._node_name = node_name
        self._label_name = label_name
        self._on_selection = on_selection
        self._lock = threading.RLock()
        self._configmaps: dict[str, ConfigMapData] | None = None
        self._node_seen = False
        self._group: str | None = None
        self._node: Obj | None = None
        self._selection: Selection | None = None
        self.configmaps_consumer = _ConfigMapConsumer(self)
        self.node_consumer = _NodeConsumer(self)

    @property
    def selection(self) -> Selection | None:
        with self._lock:
            return self._selection

    def known_configmaps(self) -> dict[str, str]:
        """The candidate ConfigMaps seen, name to resourceVersion (for diagnostics)."""
        with self._lock:
            return {name: cm.resource_version for name, cm in (self._configmaps or {}).items()}

    @property
    def node(self) -> Obj | None:
        """The Node as last seen (None before the first read)."""
        with self._lock:
            return self._node

    def _set_node(self, node: Obj) -> None:
        group = node_group((node.get("metadata") or {}).get("labels"), self._label_name)
        with self._lock:
            self._node = node
            if self._node_seen and group != self._group:
                log.info("node %s moved from group %s to %s", self._node_name, self._group, group)
            self._node_seen = True
            self._group = group
        self._reselect()

    def _set_configmaps(self, configmaps: dict[str, ConfigMapData]) -> None:
        with self._lock:
            self._configmaps = configmaps
        self._reselect()

    def _change_configmap(self, name: str, cm: ConfigMapData | None) -> None:
        with self._lock:
            if self._configmaps is None:
                return
            if cm is None:
                self._configmaps.pop(name, None)
            else:
                self._configmaps[name] = cm
        self._reselect()

    def _candidate(self, obj: Obj) -> ConfigMapData | None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if not self._names.is_candidate(name, self._node_name):
            return None
        return ConfigMapData(name, meta.get("resourceVersion", ""), dict(obj.get("data") or {}))

    def _reselect(self) -> None:
        with self._lock:
            if self._configmaps is None or not self._node_seen:
                return
            selection = select_config(self._names, self._node_name, self._group, self._configmaps)
            if selection == self._selection:
                return
            self._selection = selection
            log.info("configuration for node %s now from %s", self._node_name, selection.source)
            # Under the lock, so that two reflectors cannot hand over selections out of order;
            # on_selection only records the selection.
            self._on_selection(selection)


class _ConfigMapConsumer:
    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def replace(self, objects: list[Obj]) -> None:
        found = {}
        for obj in objects:
            cm = self._view._candidate(obj)
            if cm is not None:
                found[cm.name] = cm
        self._view._set_configmaps(found)

    def upsert(self, obj: Obj) -> None:
        cm = self._view._candidate(obj)
        if cm is not None:
            self._view._change_configmap(cm.name, cm)

    def delete(self, obj: Obj) -> None:
        cm = self._view._candidate(obj)
        if cm is not None:
            self._view._change_configmap(cm.name, None)


class _NodeConsumer:
    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def replace(self, objects: list[Obj]) -> None:
        for obj in objects:
            self._view._set_node(obj)

    def upsert(self, obj: Obj) -> None:
        self._view._set_node(obj)

    def delete(self, obj: Obj) -> None:
        # A deleted Node object is re-registered by kubelet; keep configuring from what was known.
        log.warning("node %s was deleted from the cluster; keeping its last known group", obj["metadata"]["name"])
