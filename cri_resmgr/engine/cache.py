"""The relay's record of pods and containers, persisted so a restart loses nothing.

State is written atomically (write, fsync, rename) on every change that matters
for allocations. A state file that cannot be read, or is of another format or
version, is moved aside with a log line and the relay rebuilds from the runtime.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cri_resmgr.bounded import InputError, clip, load_json, short
from cri_resmgr.config.sources import move_aside
from cri_resmgr.engine.statefile import AssignmentTable, RecordTable, Snapshot, entry, write_atomically
from cri_resmgr.policy.api import Assignment, QoS, Workload

log = logging.getLogger(__name__)

STATE_FORMAT = "cri-resmgr-state"
STATE_VERSION = 1
STATE_FILE = "state.json"
SETTLE_MOST = 64  # records of a table encoded at the end of a call (see Cache.settle)


class _Encoded:
    """A record that keeps its JSON text in the state file until one of its fields
    is set again, and then tells the cache's table that holds it: a save encodes
    only the records that changed since the last. (Fields are replaced, never
    changed in place: their dicts are values.)"""

    def __setattr__(self, name: str, value: Any) -> None:
        # The instance dict directly: a record's fields are plain ones (no descriptors), and
        # a first start sets some 17 per container.
        fields = self.__dict__
        fields[name] = value
        fields["_encoded"] = None
        table: RecordTable | None = fields.get("_table")
        if table is not None:
            table.touch(self._key(), self)

    def _held_by(self, table: RecordTable | None) -> None:
        object.__setattr__(self, "_table", table)

    def encoded(self) -> bytes:
        """The record's entry in its table of the state file (statefile.entry); b""
        when it is not saved."""
        if not self._saved():
            return b""
        text: bytes | None = self.__dict__.get("_encoded")
        if text is None:
            text = entry(self._key(), self._json())
            object.__setattr__(self, "_encoded", text)
        return text

    def _key(self) -> str:
        raise NotImplementedError

    def _json(self) -> dict[str, Any]:
        raise NotImplementedError

    def _saved(self) -> bool:
        return True


@dataclass
class PodRecord(_Encoded):
    id: str
    name: str
    namespace: str
    uid: str = ""
    cgroup_parent: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def _key(self) -> str:
        return self.id

    def _json(self) -> dict[str, Any]:
        return _pod_json(self)


@dataclass
class ContainerRecord(_Encoded):
    key: str  # the policy's key; stable from before the runtime assigns an id
    pod_id: str
    name: str
    workload: Workload
    id: str = ""  # the runtime's container id, once created
    state: str = "creating"  # creating, created, running, exited
    # LinuxContainerResources as last set (json_format dict), so unsolicited
    # updates resend the container's other resources unchanged.
    resources: dict[str, Any] = field(default_factory=dict)
    released: bool = False

    def _key(self) -> str:
        return self.key

    def _json(self) -> dict[str, Any]:
        return _container_json(self)

    def _saved(self) -> bool:
        return bool(self.id)  # created at the runtime


@dataclass
class Saved:
    policy: str
    assignments: dict[str, Assignment]


class Cache:
    """The pods and containers by key (read-only views: changes go through the
    methods, so that the state file's tables follow them)."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None):
        self.path = Path(state_dir) / STATE_FILE if state_dir else None
        self._pods: dict[str, PodRecord] = {}
        self._containers: dict[str, ContainerRecord] = {}  # by key
        self.pods: Mapping[str, PodRecord] = MappingProxyType(self._pods)
        self.containers: Mapping[str, ContainerRecord] = MappingProxyType(self._containers)
        self._by_id: dict[str, str] = {}
        # Each pod's containers by key, in the order they were added (a record's pod_id
        # never changes): a pod's stop or resize reads its own few, not every container.
        self._by_pod: dict[str, dict[str, ContainerRecord]] = {}
        self._pod_table = RecordTable()
        self._container_table = RecordTable()
        self._assignment_table = AssignmentTable()
        # A deferred save's thread cannot be cancelled (engine/saves.py): a synchronous
        # save (shutdown, a policy switch) waits for it, and a state older than the one
        # on disk is not written.
        self._write_lock = threading.Lock()
        self._taken = 0  # snapshots taken
        self._written = 0  # the generation of the snapshot on disk

    # -- queries ---------------------------------------------------------------

    def by_id(self, container_id: str) -> ContainerRecord | None:
        key = self._by_id.get(container_id)
        return self._containers.get(key) if key else None

    def of_pod(self, pod_id: str) -> list[ContainerRecord]:
        return list(self._by_pod.get(pod_id, {}).values())

    def __iter__(self) -> Iterator[ContainerRecord]:
        return iter(list(self._containers.values()))

    # -- updates ---------------------------------------------------------------

    def add_pod(self, pod: PodRecord) -> None:
        old = self._pods.get(pod.id)
        if old is not None and old is not pod:
            old._held_by(None)
        self._pods[pod.id] = pod
        self._pod_table.put(pod.id, pod)
        pod._held_by(self._pod_table)

    def set_pods(self, pods: Mapping[str, PodRecord]) -> None:
        """Replaces all pods (start-up adoption: those the runtime has)."""
        for pod in self._pods.values():
            pod._held_by(None)
        self._pods.clear()
        self._pod_table.clear()
        for pod in pods.values():
            self.add_pod(pod)

    def remove_pod(self, pod_id: str) -> list[ContainerRecord]:
        pod = self._pods.pop(pod_id, None)
        if pod is not None:
            pod._held_by(None)
            self._pod_table.drop(pod_id)
        gone = self.of_pod(pod_id)
        for c in gone:
            self.remove_container(c.key)
        return gone

    def add_container(self, c: ContainerRecord) -> None:
        old = self._containers.get(c.key)
        if old is not None and old is not c:
            old._held_by(None)
            if old.id:
                self._by_id.pop(old.id, None)
        if old is not None and old.pod_id != c.pod_id:
            self._drop_from_pod(old)
        self._containers[c.key] = c
        self._by_pod.setdefault(c.pod_id, {})[c.key] = c
        self._container_table.put(c.key, c)
        c._held_by(self._container_table)
        if c.id:
            self._by_id[c.id] = c.key

    def set_id(self, key: str, container_id: str) -> None:
        c = self._containers[key]
        c.id = container_id
        self._by_id[container_id] = key

    def remove_container(self, key: str) -> ContainerRecord | None:
        c = self._containers.pop(key, None)
        if c is not None:
            self._drop_from_pod(c)
            c._held_by(None)
            self._container_table.drop(key)
            if c.id:
                self._by_id.pop(c.id, None)
        return c

    def _drop_from_pod(self, c: ContainerRecord) -> None:
        of_pod = self._by_pod.get(c.pod_id)
        if of_pod is not None:
            of_pod.pop(c.key, None)
            if not of_pod:
                del self._by_pod[c.pod_id]

    # -- persistence ------------------------------------------------------------

    def save(self, policy: str, assignments: Mapping[str, Assignment]) -> None:
        self.write(self.snapshot(policy, assignments))

    def settle(self, placed: Iterable[str] = (), assignment: Callable[[str], Assignment | None] | None = None) -> None:
        """Encodes the records changed since the last call, and the assignments of the
        containers `placed` (`assignment`: the policy's), so that the next snapshot
        finds them ready. A snapshot encodes whatever is left: this only spreads the
        work. Not more than SETTLE_MOST records of a table, though: a pool change that
        updated a thousand containers (some 12 ms to encode) is left to the save rather
        than added to the reply of the call that caused it."""
        if self.path is None:
            return
        self._pod_table.settle(SETTLE_MOST)
        self._container_table.settle(SETTLE_MOST)
        if assignment is not None:
            for key in placed:
                a = assignment(key)
                if a is not None:
                    self._assignment_table.note(key, a)

    def snapshot(self, policy: str, assignments: Mapping[str, Assignment]) -> Snapshot | None:
        """The state, taken where the cache is owned (the event loop): each pod,
        container and assignment as its JSON text, encoded anew only when it changed
        since the last save (statefile.py). `write` writes them, off the loop."""
        if self.path is None:
            return None
        self._taken += 1
        return Snapshot(
            head={"format": STATE_FORMAT, "version": STATE_VERSION, "saved": time.time(), "policy": policy},
            pods=self._pod_table.entries(), containers=self._container_table.entries(),
            assignments=self._assignment_table.entries(assignments), generation=self._taken)

    def write(self, data: Snapshot | None) -> None:
        """Write, fsync, rename (statefile.write_atomically). Safe off-loop; one write
        at a time, and none of a state older than the one written last."""
        if self.path is None or data is None:
            return
        with self._write_lock:
            if data.generation <= self._written:
                return
            write_atomically(self.path, data.parts())
            self._written = data.generation

    def load(self) -> Saved | None:
        """Loads saved state into this cache; None when there is none usable. A file
        that cannot be read for whatever reason (not JSON, nested 200,000 deep, a CPU
        list of a hundred million CPUs, a field of the wrong type) is moved aside with
        one line saying why, and the relay rebuilds from the runtime."""
        if self.path is None or not self.path.exists():
            return None
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_STATE_SIZE + 1)
            if len(raw) > MAX_STATE_SIZE:
                raise InputError(f"larger than {MAX_STATE_SIZE >> 20} MiB")
            data = load_json(raw, "state", max_depth=STATE_DEPTH)
            if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
                raise ValueError("not a cri-resmgr state file")
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"state format version {short(data.get('version'))}, expected {STATE_VERSION}")
            pods = {k: _pod_from_json(k, v) for k, v in _table(data, "pods").items()}
            containers = [_container_from_json(k, v) for k, v in _table(data, "containers").items()]
            assignments = {k: _assignment_from_json(k, v) for k, v in _table(data, "assignments").items()}
            policy = _text(data.get("policy"), "policy")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            # The file is the only thing read here: any error is about it, never a bug elsewhere.
            why = clip(str(e) if not isinstance(e, OSError) else e.strerror or str(e), 200)
            log.error("state file %s is unusable (%s: %s); %s; rebuilding from the runtime",
                      self.path, type(e).__name__, why, move_aside(self.path))
            return None
        self.set_pods(pods)
        for key in list(self._containers):
            self.remove_container(key)
        for c in containers:
            self.add_container(c)
        return Saved(policy=policy, assignments=assignments)


MAX_STATE_SIZE = 256 << 20  # bytes: some 100,000 containers
STATE_DEPTH = 16  # the file's own nesting is 5 (assignment details add a few)


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    table = data[name]
    if not isinstance(table, dict):
        raise ValueError(f"{name}: expected an object, got {short(table)}")
    return table


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {short(value)}")
    return value


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{where}: expected an object of strings, got {short(value)}")
    return value


def _fields(value: Any, where: str, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {short(value)}")
    unknown = set(value) - set(names)
    if unknown:
        raise ValueError(f"{where}: unknown field {short(sorted(unknown)[0])}")
    return value


def _pod_from_json(key: str, d: Any) -> PodRecord:
    where = f"pods.{clip(key, 80)}"
    d = _fields(d, where, _POD_FIELDS)
    for name in ("id", "name", "namespace", "uid", "cgroup_parent"):
        if name in d:
            _text(d[name], f"{where}.{name}")
    for name in ("annotations", "labels"):
        if name in d:
            _strings(d[name], f"{where}.{name}")
    return PodRecord(**d)


def _assignment_from_json(key: str, d: Any) -> Assignment:
    where = f"assignments.{clip(key, 80)}"
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {short(d)}")
    try:
        return Assignment.from_json(d)
    except (KeyError, ValueError) as e:
        raise ValueError(f"{where}: {clip(str(e), 120)}") from None


def _write_all(fd: int, parts: list[bytes]) -> None:
    for i in range(0, len(parts), _IOV_MAX):
        batch = parts[i:i + _IOV_MAX]
        done = os.writev(fd, batch)
        if done < sum(map(len, batch)):  # a short write (a full disk says so with an error)
            rest = memoryview(b"".join(batch))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]


_IOV_MAX = 1024  # writev's limit on Linux (sysconf IOV_MAX)


# The state is saved on the event loop, many times a second under churn: these build
# what dataclasses.asdict would, field by field, at a fraction of its cost (its
# recursive deep copy took some 250 ms for 1000 containers, stalling every call).
_POD_FIELDS = tuple(f.name for f in dataclasses.fields(PodRecord))
_CONTAINER_FIELDS = tuple(f.name for f in dataclasses.fields(ContainerRecord))
_WORKLOAD_FIELDS = tuple(f.name for f in dataclasses.fields(Workload))
_MAPPINGS = ("annotations", "labels", "pod_annotations", "container_annotations", "resources")


def _plain(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    d = {n: getattr(obj, n) for n in names}
    for n in _MAPPINGS:
        if n in d:
            d[n] = dict(d[n])
    return d


def _pod_json(p: PodRecord) -> dict[str, Any]:
    return _plain(p, _POD_FIELDS)


def _container_json(c: ContainerRecord) -> dict[str, Any]:
    d = _plain(c, _CONTAINER_FIELDS)
    w = d["workload"] = _plain(c.workload, _WORKLOAD_FIELDS)
    w["qos"] = c.workload.qos.value
    return d


# Workload fields by the type the policies take them as (the others: strings, mappings).
_QOS = tuple(q.value for q in QoS)
_WORKLOAD_INTS = ("cpu_request", "memory_request")
_WORKLOAD_OPTIONAL_INTS = ("cpu_limit", "memory_limit")
_WORKLOAD_BOOLS = ("prefer_reserved", "system")
_WORKLOAD_OPTIONAL_BOOLS = ("prefer_isolated", "prefer_shared")


def _container_from_json(key: str, d: Any) -> ContainerRecord:
    where = f"containers.{clip(key, 80)}"
    d = dict(_fields(d, where, _CONTAINER_FIELDS))
    for name in ("key", "pod_id", "name", "id", "state"):
        if name in d:
            _text(d[name], f"{where}.{name}")
    if not isinstance(d.get("resources", {}), dict):
        raise ValueError(f"{where}.resources: expected an object")
    if not isinstance(d.get("released", False), bool):
        raise ValueError(f"{where}.released: expected true or false")
    w = dict(_fields(d["workload"], f"{where}.workload", _WORKLOAD_FIELDS))
    for name in ("key", "namespace", "pod", "name"):
        _text(w[name], f"{where}.workload.{name}")
    for name in ("labels", "pod_annotations", "container_annotations"):
        if name in w:
            _strings(w[name], f"{where}.workload.{name}")
    for name in (*_WORKLOAD_INTS, *_WORKLOAD_OPTIONAL_INTS):
        v = w.get(name)
        if not (v is None and name in _WORKLOAD_OPTIONAL_INTS or
                type(v) is int and 0 <= v < 1 << 63 or v is None and name not in w):
            raise ValueError(f"{where}.workload.{name}: expected a non-negative integer, got {short(v)}")
    for name in (*_WORKLOAD_BOOLS, *_WORKLOAD_OPTIONAL_BOOLS):
        v = w.get(name)
        if not (isinstance(v, bool) or v is None and (name in _WORKLOAD_OPTIONAL_BOOLS or name not in w)):
            raise ValueError(f"{where}.workload.{name}: expected true or false, got {short(v)}")
    if w.get("qos") not in _QOS:
        raise ValueError(f"{where}.workload.qos: expected one of {', '.join(_QOS)}, got {short(w.get('qos'))}")
    w["qos"] = QoS(w["qos"])
    d["workload"] = Workload(**w)
    return ContainerRecord(**d)
