"""The two things the agent watches: its Node, and the ConfigMaps of the config namespace.

Each returns the list and watch functions a Reflector needs. The Node is read
with get (not list) so that the agent needs no permission to list all Nodes;
its watch is narrowed to the one Node by a field selector.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes import client, watch

from cri_resmgr_agent.kube import body
from cri_resmgr_agent.reflector import ListFunc, Obj, WatchEvent, WatchFunc


def _json(response: object) -> dict[str, Any]:
    data = json.loads(body(response))
    if not isinstance(data, dict):
        raise ValueError(f"the API server answered {type(data).__name__}, not an object")
    return data


def configmap_source(core: client.CoreV1Api, namespace: str, watch_timeout: int,
                     request_timeout: float) -> tuple[ListFunc, WatchFunc]:
    def list_func() -> tuple[list[Obj], str]:
        body = _json(core.list_namespaced_config_map(namespace, _preload_content=False,
                                                     _request_timeout=request_timeout))
        return body.get("items") or [], body["metadata"]["resourceVersion"]

    def watch_func(watcher: watch.Watch, version: str) -> Iterator[WatchEvent]:
        events: Iterator[WatchEvent] = watcher.stream(
            core.list_namespaced_config_map, namespace, resource_version=version or None,
            allow_watch_bookmarks=True, timeout_seconds=watch_timeout,
            _request_timeout=(request_timeout, watch_timeout + request_timeout))
        return events

    return list_func, watch_func


def node_source(core: client.CoreV1Api, node_name: str, watch_timeout: int,
                request_timeout: float) -> tuple[ListFunc, WatchFunc]:
    def list_func() -> tuple[list[Obj], str]:
        node = _json(core.read_node(node_name, _preload_content=False, _request_timeout=request_timeout))
        return [node], node["metadata"]["resourceVersion"]

    def watch_func(watcher: watch.Watch, version: str) -> Iterator[WatchEvent]:
        events: Iterator[WatchEvent] = watcher.stream(
            core.list_node, field_selector=f"metadata.name={node_name}", resource_version=version or None,
            allow_watch_bookmarks=True, timeout_seconds=watch_timeout,
            _request_timeout=(request_timeout, watch_timeout + request_timeout))
        return events

    return list_func, watch_func
