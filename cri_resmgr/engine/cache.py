"""The relay's record of pods and containers, persisted so a restart loses nothing.

State is written atomically (write, fsync, rename) on every change that matters
for allocations. A state file that cannot be read, or is of another format or
version, is moved aside with a log line and the relay rebuilds from the runtime.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cri_resmgr.policy.api import Assignment, QoS, Workload

log = logging.getLogger(__name__)

STATE_FORMAT = "cri-resmgr-state"
STATE_VERSION = 1
STATE_FILE = "state.json"


class _Encoded:
    """A record that keeps its JSON text in the state file until one of its fields
    is set again: a save re-encodes only the records that changed since the last.
    (Fields are replaced, never changed in place: their dicts are values.)"""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_encoded", None)

    def encoded(self) -> str:
        """The record's entry in its table of the state file: `"key":{...}`."""
        text: str | None = getattr(self, "_encoded", None)
        if text is None:
            key, value = self._entry()
            text = _entry(key, value)
            object.__setattr__(self, "_encoded", text)
        return text

    def _entry(self) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError


@dataclass
class PodRecord(_Encoded):
    id: str
    name: str
    namespace: str
    uid: str = ""
    cgroup_parent: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def _entry(self) -> tuple[str, dict[str, Any]]:
        return self.id, _pod_json(self)


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

    def _entry(self) -> tuple[str, dict[str, Any]]:
        return self.key, _container_json(self)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _entry(key: str, value: Any) -> str:
    return f"{_dumps(key)}:{_dumps(value)}"


@dataclass(frozen=True)
class Snapshot:
    """The state file's parts, each pod, container and assignment as its JSON
    entry (`"key":{...}`) in its table."""

    head: dict[str, Any]
    pods: list[str]
    containers: list[str]
    assignments: list[str]

    def encode(self) -> bytes:
        """The bytes json.dumps(state, separators=(",", ":")) gives for the whole state."""
        def table(entries: list[str]) -> str:
            return "{" + ",".join(entries) + "}"

        head = _dumps(self.head)[:-1]  # without its closing brace: the tables follow
        return (f'{head},"pods":{table(self.pods)},"containers":{table(self.containers)},'
                f'"assignments":{table(self.assignments)}}}').encode()


@dataclass
class Saved:
    policy: str
    assignments: dict[str, Assignment]


class Cache:
    def __init__(self, state_dir: str | os.PathLike[str] | None = None):
        self.path = Path(state_dir) / STATE_FILE if state_dir else None
        self.pods: dict[str, PodRecord] = {}
        self.containers: dict[str, ContainerRecord] = {}  # by key
        self._by_id: dict[str, str] = {}
        # The last encoding of each assignment, with what it encoded (policies build
        # assignments anew for each save: equal ones are not encoded again).
        self._assignments_encoded: dict[str, tuple[Assignment, str]] = {}

    # -- queries ---------------------------------------------------------------

    def by_id(self, container_id: str) -> ContainerRecord | None:
        key = self._by_id.get(container_id)
        return self.containers.get(key) if key else None

    def of_pod(self, pod_id: str) -> list[ContainerRecord]:
        return [c for c in self.containers.values() if c.pod_id == pod_id]

    def __iter__(self) -> Iterator[ContainerRecord]:
        return iter(list(self.containers.values()))

    # -- updates ---------------------------------------------------------------

    def add_pod(self, pod: PodRecord) -> None:
        self.pods[pod.id] = pod

    def remove_pod(self, pod_id: str) -> list[ContainerRecord]:
        self.pods.pop(pod_id, None)
        gone = self.of_pod(pod_id)
        for c in gone:
            self.remove_container(c.key)
        return gone

    def add_container(self, c: ContainerRecord) -> None:
        self.containers[c.key] = c
        if c.id:
            self._by_id[c.id] = c.key

    def set_id(self, key: str, container_id: str) -> None:
        c = self.containers[key]
        c.id = container_id
        self._by_id[container_id] = key

    def remove_container(self, key: str) -> ContainerRecord | None:
        c = self.containers.pop(key, None)
        if c is not None and c.id:
            self._by_id.pop(c.id, None)
        return c

    # -- persistence ------------------------------------------------------------

    def save(self, policy: str, assignments: Mapping[str, Assignment]) -> None:
        self.write(self.snapshot(policy, assignments))

    def snapshot(self, policy: str, assignments: Mapping[str, Assignment]) -> Snapshot | None:
        """The state, taken where the cache is owned (the event loop): each pod,
        container and assignment as its JSON text, encoded anew only when it changed
        since the last save. `write` joins them, off the loop."""
        if self.path is None:
            return None
        return Snapshot(
            head={"format": STATE_FORMAT, "version": STATE_VERSION, "saved": time.time(), "policy": policy},
            pods=[p.encoded() for p in self.pods.values()],
            containers=[c.encoded() for c in self.containers.values() if c.id],
            assignments=self._assignments_text(assignments))

    def _assignments_text(self, assignments: Mapping[str, Assignment]) -> list[str]:
        kept = self._assignments_encoded
        fresh: dict[str, tuple[Assignment, str]] = {}
        out = []
        for k, a in assignments.items():
            was = kept.get(k)
            # Equal details may differ in their keys' order, and so in their text.
            same = was is not None and not a.details and was[0] == a
            text = was[1] if was is not None and same else _entry(k, a.to_json())
            fresh[k] = (a, text)
            out.append(text)
        self._assignments_encoded = fresh  # forgets the released ones
        return out

    def write(self, data: Snapshot | None) -> None:
        """Write, fsync, rename: a crash leaves the old file or the new one. Safe off-loop."""
        if self.path is None or data is None:
            return
        encoded = data.encode()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(encoded)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def load(self) -> Saved | None:
        """Loads saved state into this cache; None when there is none usable."""
        if self.path is None or not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
                raise ValueError("not a cri-resmgr state file")
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"state format version {data.get('version')!r}, expected {STATE_VERSION}")
            pods = {k: PodRecord(**v) for k, v in data["pods"].items()}
            containers = [_container_from_json(v) for v in data["containers"].values()]
            assignments = {k: Assignment.from_json(v) for k, v in data["assignments"].items()}
            policy = str(data["policy"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            aside = self.path.with_name(f"{self.path.name}.bad-{int(time.time())}")
            try:
                os.replace(self.path, aside)
                where = f"moved aside to {aside}"
            except OSError as move_error:
                where = f"could not move it aside: {move_error}"
            log.error("state file %s is unusable (%s); %s; rebuilding from the runtime", self.path, e, where)
            return None
        self.pods = pods
        self.containers = {}
        self._by_id = {}
        for c in containers:
            self.add_container(c)
        return Saved(policy=policy, assignments=assignments)


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


def _container_from_json(d: dict[str, Any]) -> ContainerRecord:
    w = dict(d["workload"])
    w["qos"] = QoS(w["qos"])
    d = dict(d)
    d["workload"] = Workload(**w)
    return ContainerRecord(**d)
