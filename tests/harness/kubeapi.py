"""An in-process HTTP server speaking the Kubernetes REST and watch protocol.

No real API server can run where the tests run, so this one serves the part of
the protocol the node agent uses, byte-compatible enough for the real
`kubernetes` Python client: nodes, configmaps and events; lists with field and
label selectors and a list resourceVersion; `?watch=1` streams of JSON lines
sent as HTTP/1.1 chunks, starting from a resourceVersion, with BOOKMARK events
when asked for, and a 410 Gone ERROR event when the version is too old;
merge and strategic-merge PATCH with resourceVersion preconditions; POST of
Events, core/v1 and events.k8s.io/v1, validated as the real server validates them
(tests/harness/kube_events.py: 422 Invalid with the real Status body). Tests drive the cluster side through the methods (put_configmap,
set_node_labels, ...), and simulate outages with down()/up(), watch expiry
with expire_watches() and compaction with compact().

Limitations (not used by the agent): strategic merge patch replaces lists
instead of merging by patchMergeKey; no JSON patch, no apply, no pagination.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.harness.kube_events import EVENTS_GROUP, core_to_v1, invalid_status, v1_to_core, validate_event_create

# (verb, API group, resource, namespace, name) -> allowed; the core group is "", resource is
# e.g. "nodes/status".
Authorizer = Callable[[str, str, str, str, str], bool]

_NAMESPACED = {"configmaps", "events"}
_KINDS = {"nodes": "Node", "configmaps": "ConfigMap", "events": "Event"}

_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

_ROUTES = [
    (re.compile(r"^/api/v1/(?P<resource>nodes)(?:/(?P<name>[^/]+)(?:/(?P<sub>status))?)?$"), False),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<resource>configmaps|events)(?:/(?P<name>[^/]+))?$"), True),
    (re.compile(r"^/apis/(?P<group>events\.k8s\.io)/v1/namespaces/(?P<ns>[^/]+)/(?P<resource>events)"
                r"(?:/(?P<name>[^/]+))?$"), True),
]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self._body = body

    def status(self) -> dict[str, Any]:
        if self._body is not None:
            return self._body
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}


@dataclass
class _Change:
    rv: int
    resource: str
    namespace: str
    type: str
    obj: dict[str, Any]


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, str]
    verb: str
    code: int = 0  # the HTTP status answered


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def parse_label_selector(selector: str) -> Callable[[dict[str, str]], bool]:
    """Equality, set-based (in, notin) and existence requirements, comma-separated."""
    requirements: list[Callable[[dict[str, str]], bool]] = []
    for part in re.split(r",(?![^()]*\))", selector.strip()) if selector.strip() else []:
        part = part.strip()
        m = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                requirements.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                requirements.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
            continue
        m = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)", part)
        if m:
            key, op, value = m.groups()
            if op == "!=":
                requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
            continue
        m = re.fullmatch(r"(!?)([\w./-]+)", part)
        if m:
            negate, key = m.groups()
            requirements.append(lambda labels, k=key, n=bool(negate): (k in labels) != n)
            continue
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
    return lambda labels: all(r(labels) for r in requirements)


def parse_field_selector(selector: str) -> Callable[[dict[str, Any]], bool]:
    requirements = []
    for part in [p for p in selector.split(",") if p.strip()]:
        m = re.fullmatch(r"\s*(metadata\.name|metadata\.namespace)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise ApiError(400, "BadRequest", f"field label not supported: {part!r}")
        field, op, value = m.groups()
        attr = field.split(".")[1]
        requirements.append(lambda obj, a=attr, v=value, eq=(op != "!="):
                            (obj["metadata"].get(a, "") == v) == eq)
    return lambda obj: all(r(obj) for r in requirements)


class FakeKubeAPI:
    """The API server. start() before use, stop() after; url and write_kubeconfig() to reach it."""

    def __init__(self, token: str = "test-token", authorizer: Authorizer | None = None,
                 host: str = "127.0.0.1") -> None:
        self.token = token
        self.authorizer = authorizer
        self._host = host
        self._port = 0
        self._cond = threading.Condition()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._history: list[_Change] = []
        self._rv = 100
        self._floor = 0  # watches from a resourceVersion below this get 410 Gone
        self._expire_gen = 0
        self._bookmark_gen = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._running = False
        self.requests: list[RequestRecord] = []

    # ---------------------------------------------------------- lifecycle

    def start(self) -> FakeKubeAPI:
        self.up()
        return self

    def stop(self) -> None:
        self.down()

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    def up(self) -> None:
        """Starts serving (again, on the same port after down())."""
        if self._running:
            return
        server = ThreadingHTTPServer((self._host, self._port), _make_handler(self))
        server.daemon_threads = True
        self._port = server.server_address[1]
        self._server = server
        self._running = True
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-kubeapi", daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stops listening and cuts every open connection, watches included; the store is kept."""
        if not self._running:
            return
        with self._cond:
            self._running = False
            self._cond.notify_all()
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        with self._cond:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server = None

    def write_kubeconfig(self, path: str, namespace: str = "default") -> str:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "agent", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent",
                                                      "namespace": namespace}}],
        }
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        return path

    # ------------------------------------------------- the cluster side

    def put_node(self, name: str, labels: dict[str, str] | None = None,
                 capacity: dict[str, str] | None = None) -> dict[str, Any]:
        capacity = capacity or {"cpu": "2", "memory": "4Gi", "pods": "110"}
        obj = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": dict(labels or {})},
               "spec": {}, "status": {"capacity": dict(capacity), "allocatable": dict(capacity)}}
        return self._store("nodes", "", obj)

    def set_node_labels(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        obj = self.get_object("nodes", "", name)
        obj["metadata"]["labels"] = dict(labels)
        return self._store("nodes", "", obj)

    def put_configmap(self, namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
        key = ("configmaps", namespace, name)
        with self._cond:
            obj = copy.deepcopy(self._objects.get(key)) or {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
        obj["data"] = dict(data)
        return self._store("configmaps", namespace, obj)

    def delete_configmap(self, namespace: str, name: str) -> None:
        self._delete("configmaps", namespace, name)

    def get_object(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self._cond:
            obj = self._objects.get((resource, namespace, name))
            if obj is None:
                raise KeyError(f"{resource} {namespace}/{name}")
            return copy.deepcopy(obj)

    def list_objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [copy.deepcopy(o) for (r, ns, _), o in sorted(self._objects.items())
                    if r == resource and (namespace is None or ns == namespace)]

    @property
    def resource_version(self) -> str:
        """The cluster's current resourceVersion."""
        with self._cond:
            return str(self._rv)

    def compact(self) -> None:
        """Forgets history: watches from any resourceVersion seen so far get 410 Gone."""
        with self._cond:
            self._rv += 1  # writes elsewhere in the cluster move the version on
            self._floor = self._rv

    def expire_watches(self) -> None:
        """Compacts, and ends every open watch with a 410 Gone ERROR event."""
        with self._cond:
            self.compact()
            self._expire_gen += 1
            self._cond.notify_all()

    def bookmark(self) -> None:
        """Sends a BOOKMARK with the current resourceVersion to every watch that allows them."""
        with self._cond:
            self._bookmark_gen += 1
            self._cond.notify_all()

    def count_requests(self, verb: str, resource_path_part: str) -> int:
        with self._cond:
            return sum(1 for r in self.requests if r.verb == verb and resource_path_part in r.path)

    # ------------------------------------------------------------ store

    def _store(self, resource: str, namespace: str, obj: dict[str, Any], event: str | None = None) -> dict[str, Any]:
        with self._cond:
            key = (resource, namespace, obj["metadata"]["name"])
            meta = obj["metadata"]
            old = self._objects.get(key)
            if old is None:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", _now())
            else:
                meta["uid"] = old["metadata"]["uid"]
                meta["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._objects[key] = copy.deepcopy(obj)
            self._history.append(_Change(self._rv, resource, namespace,
                                         event or ("ADDED" if old is None else "MODIFIED"), copy.deepcopy(obj)))
            self._cond.notify_all()
            return copy.deepcopy(obj)

    def _delete(self, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self._cond:
            obj = self._objects.pop((resource, namespace, name), None)
            if obj is None:
                raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._history.append(_Change(self._rv, resource, namespace, "DELETED", copy.deepcopy(obj)))
            self._cond.notify_all()
            return obj

    # ---------------------------------------------------------- serving

    def _authorize(self, verb: str, group: str, resource: str, sub: str | None, namespace: str,
                   name: str) -> None:
        full = f"{resource}/{sub}" if sub else resource
        if self.authorizer is not None and not self.authorizer(verb, group, full, namespace, name):
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            qualified = f"{full}.{group}" if group else full
            raise ApiError(403, "Forbidden", f'{qualified} is forbidden: User "agent" cannot {verb} '
                                             f'resource "{full}" in API group "{group}"{where}')

    def _list(self, resource: str, namespace: str, query: dict[str, str]) -> dict[str, Any]:
        matches = self._matcher(query)
        with self._cond:
            items = [copy.deepcopy(o) for (r, ns, _), o in sorted(self._objects.items())
                     if r == resource and (resource not in _NAMESPACED or ns == namespace) and matches(o)]
            rv = self._rv
        for item in items:
            item.pop("apiVersion", None)
            item.pop("kind", None)
        return {"apiVersion": "v1", "kind": _KINDS[resource] + "List",
                "metadata": {"resourceVersion": str(rv)}, "items": items}

    @staticmethod
    def _matcher(query: dict[str, str]) -> Callable[[dict[str, Any]], bool]:
        labels = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""))
        return lambda obj: fields(obj) and labels(obj["metadata"].get("labels") or {})

    def _watch(self, handler: BaseHTTPRequestHandler, resource: str, namespace: str,
               query: dict[str, str]) -> None:
        matches = self._matcher(query)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query.get("timeoutSeconds", "1800"))
        deadline = time.monotonic() + timeout
        rv_param = query.get("resourceVersion", "")
        send = _ChunkWriter(handler)
        send.start()

        def in_scope(change: _Change) -> bool:
            return change.resource == resource and (resource not in _NAMESPACED or change.namespace == namespace)

        with self._cond:
            expire_gen, bookmark_gen = self._expire_gen, self._bookmark_gen
            if rv_param in ("", "0"):
                # No version: the current state first, as synthetic ADDED events.
                initial = [_Change(int(o["metadata"]["resourceVersion"]), r, ns, "ADDED", copy.deepcopy(o))
                           for (r, ns, _), o in sorted(self._objects.items())]
                pending = [c for c in initial if in_scope(c) and matches(c.obj)]
                cursor = self._rv
            else:
                cursor = int(rv_param)
                if cursor < self._floor:
                    pending = None
                else:
                    pending = [c for c in self._history if c.rv > cursor and in_scope(c) and matches(c.obj)]
                    cursor = max([cursor] + [c.rv for c in self._history])
        if pending is None:
            send.event("ERROR", _gone(rv_param, self._floor).status())
            send.finish()
            return
        for change in pending:
            send.event(change.type, change.obj)
        while True:
            with self._cond:
                while True:
                    if not self._running:
                        return  # the connection is being cut: no orderly end
                    if self._expire_gen != expire_gen:
                        out = [("ERROR", _gone(str(cursor), self._floor).status())]
                        done = True
                        break
                    new = [c for c in self._history if c.rv > cursor]
                    if new:
                        cursor = new[-1].rv
                        out = [(c.type, c.obj) for c in new if in_scope(c) and matches(c.obj)]
                        done = False
                        if out:
                            break
                        continue
                    if self._bookmark_gen != bookmark_gen:
                        bookmark_gen = self._bookmark_gen
                        if bookmarks:
                            out = [("BOOKMARK", {"kind": _KINDS[resource], "apiVersion": "v1",
                                                 "metadata": {"resourceVersion": str(self._rv)}})]
                            done = False
                            break
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        out, done = [], True
                        break
                    self._cond.wait(min(left, 0.5))
            for type_, obj in out:
                send.event(type_, copy.deepcopy(obj))
            if done:
                send.finish()
                return

    def _patch(self, name: str, sub: str | None, content_type: str, body: bytes) -> dict[str, Any]:
        if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                        f"accepted media types include: application/merge-patch+json, "
                                                        f"application/strategic-merge-patch+json; got {content_type}")
        try:
            patch = json.loads(body)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid patch body: {exc}") from None
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "patch body must be a JSON object")
        with self._cond:
            old = self._objects.get(("nodes", "", name))
            if old is None:
                raise ApiError(404, "NotFound", f'nodes "{name}" not found')
            want_rv = (patch.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object '
                                                f"has been modified; please apply your changes to the latest "
                                                f"version and try again")
            new = merge_patch(old, patch)
            if sub == "status":
                new = dict(old, status=new.get("status", {}))
            else:
                new["status"] = old.get("status", {})
            for bad in ("name", "uid"):
                if new["metadata"].get(bad) != old["metadata"].get(bad):
                    raise ApiError(422, "Invalid", f"metadata.{bad}: field is immutable")
            _validate_node(new)
            return self._store("nodes", "", new)

    def _create(self, group: str, resource: str, namespace: str, body: bytes) -> dict[str, Any]:
        try:
            obj = json.loads(body)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid body: {exc}") from None
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        if group == EVENTS_GROUP:
            obj = v1_to_core(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "metadata.name: Required value: name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if meta.setdefault("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                                              "the namespace sent on the request")
        if resource == "events":
            errors = validate_event_create(obj, namespace, group)
            if errors:
                status = invalid_status(group, meta["name"], errors)
                raise ApiError(422, "Invalid", status["message"], status)
        with self._cond:
            if (resource, namespace, meta["name"]) in self._objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", _KINDS[resource])
        stored = self._store(resource, namespace, obj)
        return core_to_v1(stored) if group == EVENTS_GROUP else stored

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        split = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        verb = method.lower()
        record: RequestRecord | None = None
        # Read the body first: a keep-alive connection must not be left mid-request.
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            if handler.headers.get("Authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            for pattern, namespaced in _ROUTES:  # noqa: B007 (the matching route's, after break)
                m = pattern.match(split.path)
                if m:
                    break
            else:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource {split.path}")
            resource, name, sub = m.group("resource"), m.group("name") or "", m.groupdict().get("sub")
            group = m.groupdict().get("group") or ""
            namespace = m.group("ns") if namespaced else ""
            watching = query.get("watch") in ("true", "1")
            verb = {"GET": "watch" if watching else ("get" if name else "list"),
                    "PATCH": "patch", "POST": "create", "DELETE": "delete", "PUT": "update"}[method]
            record = RequestRecord(method, split.path, query, verb, 200)
            with self._cond:
                self.requests.append(record)
            self._authorize(verb, group, resource, sub, namespace, name)
            if group and verb != "create":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {split.path}")
            if verb == "watch":
                self._watch(handler, resource, namespace, query)
                return
            if verb == "list":
                _send_json(handler, 200, self._list(resource, namespace, query))
            elif verb == "get":
                try:
                    _send_json(handler, 200, self.get_object(resource, namespace, name))
                except KeyError:
                    raise ApiError(404, "NotFound", f'{resource} "{name}" not found') from None
            elif verb == "patch" and resource == "nodes" and name:
                _send_json(handler, 200, self._patch(name, sub, handler.headers.get("Content-Type", ""), body))
            elif verb == "create" and resource in _NAMESPACED and not name:
                record.code = 201
                _send_json(handler, 201, self._create(group, resource, namespace, body))
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {split.path}")
        except ApiError as err:
            if record is not None:
                record.code = err.code
            _send_json(handler, err.code, err.status())


def _gone(rv: str, floor: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {rv} ({floor})")


def _validate_node(node: dict[str, Any]) -> None:
    for taint in (node.get("spec") or {}).get("taints") or []:
        if not taint.get("key") or taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ApiError(422, "Invalid", f"spec.taints: Invalid value: {json.dumps(taint)}: "
                                           f"a taint needs a key and a valid effect")
    for field in ("labels", "annotations"):
        for key, value in ((node["metadata"].get(field)) or {}).items():
            if not isinstance(value, str):
                raise ApiError(422, "Invalid", f"metadata.{field}[{key}]: value must be a string")
    for value in (node["metadata"].get("labels") or {}).values():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise ApiError(422, "Invalid", f'Node "{node["metadata"]["name"]}" is invalid: metadata.labels: '
                                           f'Invalid value: "{value}": a valid label must be an empty string '
                                           f"or consist of alphanumeric characters, '-', '_' or '.'")


def _send_json(handler: BaseHTTPRequestHandler, code: int, obj: dict[str, Any]) -> None:
    body = json.dumps(obj).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _ChunkWriter:
    """Writes a watch response: one JSON event per line, each line one HTTP chunk."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler

    def start(self) -> None:
        h = self._handler
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()

    def event(self, type_: str, obj: dict[str, Any]) -> None:
        line = json.dumps({"type": type_, "object": obj}).encode() + b"\n"
        self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self._handler.wfile.flush()

    def finish(self) -> None:
        self._handler.wfile.write(b"0\r\n\r\n")
        self._handler.wfile.flush()


def _make_handler(api: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            with api._cond:
                api._connections.add(self.connection)

        def finish(self) -> None:
            with api._cond:
                api._connections.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def handle_one_request(self) -> None:
            if not api._running:
                self.close_connection = True
                return
            try:
                super().handle_one_request()
            except (BrokenPipeError, ConnectionResetError, ValueError, OSError):
                self.close_connection = True

        def do_GET(self) -> None:
            api._handle(self, "GET")

        def do_PATCH(self) -> None:
            api._handle(self, "PATCH")

        def do_POST(self) -> None:
            api._handle(self, "POST")

        def do_PUT(self) -> None:
            api._handle(self, "PUT")

        def do_DELETE(self) -> None:
            api._handle(self, "DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests assert on `requests`, not on a log

    return Handler


def rbac_authorizer(rules_by_namespace: dict[str, Iterable[dict[str, Any]]],
                    cluster_rules: Iterable[dict[str, Any]]) -> Authorizer:
    """An Authorizer from RBAC PolicyRules: Role rules keyed by their namespace, and ClusterRole rules."""
    def allowed(rules: Iterable[dict[str, Any]], verb: str, group: str, resource: str, name: str) -> bool:
        for rule in rules:
            if group not in rule.get("apiGroups", []) and "*" not in rule.get("apiGroups", []):
                continue
            if resource not in rule.get("resources", []) and "*" not in rule.get("resources", []):
                continue
            if verb not in rule.get("verbs", []) and "*" not in rule.get("verbs", []):
                continue
            names = rule.get("resourceNames")
            if names and name not in names:
                continue
            return True
        return False

    cluster = list(cluster_rules)
    namespaced = {ns: list(rules) for ns, rules in rules_by_namespace.items()}

    def authorize(verb: str, group: str, resource: str, namespace: str, name: str) -> bool:
        if allowed(cluster, verb, group, resource, name):
            return True
        return bool(namespace) and allowed(namespaced.get(namespace, []), verb, group, resource, name)

    return authorize
