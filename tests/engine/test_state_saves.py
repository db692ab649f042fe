"""State saves encode only what changed since the last (engine/statefile.py), and
lose nothing: after any change, for every policy, the file is byte for byte one
json.dumps of the whole state as it is then."""

from __future__ import annotations

import json
import random

import pytest
from test_cache_state import _plain_state

from cri_resmgr.engine import cache as cache_module
from cri_resmgr.engine import statefile
from cri_resmgr.engine.cache import Cache, ContainerRecord, PodRecord
from cri_resmgr.policy.api import Assignment, Policy, QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology

BALLOONS = {"BalloonTypes": [{"Name": "grow", "Namespaces": ["grow"], "MinCPUs": 1, "MaxCPUs": 6},
                             {"Name": "batch", "Namespaces": ["batch"], "ShareIdleCPUsInSame": "system"}]}
POLICIES = ["static", "static-plus", "topology-aware", "balloons"]


def _policy(name: str) -> Policy:
    topology = fake_topology(sockets=2, cores_per_die=4, threads_per_core=2)  # 16 CPUs, 2 NUMA nodes
    options = BALLOONS if name == "balloons" else {}
    context = build_context(topology, reserved=1, options=options)
    factory = default_registry().lookup(name).factory
    assert factory is not None
    return factory(context)


def _workload(rng: random.Random, key: str) -> Workload:
    kind = rng.choice(["guaranteed", "fractional", "burstable", "besteffort"])
    namespace = rng.choice(["default", "grow", "batch"])
    cpu = {"guaranteed": 1000 * rng.randint(1, 2), "fractional": 1500,
           "burstable": 300, "besteffort": 0}[kind]
    qos = QoS.GUARANTEED if kind in ("guaranteed", "fractional") else \
        QoS.BURSTABLE if cpu else QoS.BESTEFFORT
    return Workload(key=key, namespace=namespace, pod=f"pod-{key}", name="c", qos=qos, cpu_request=cpu,
                    cpu_limit=cpu if qos is QoS.GUARANTEED else None)


def _check(cache: Cache, name: str, policy: Policy) -> dict:
    assignments = dict(policy.assignments())
    cache.save(name, assignments)
    saved = cache.path.read_bytes()
    assert saved == _plain_state(cache, name, assignments)
    return json.loads(saved)


def _churn(name: str, cache: Cache, steps: int = 120, seed: int = 7) -> None:
    """Random creates, kubelet-like record changes and removals, with a save after
    each: every file must equal the state written from scratch."""
    rng = random.Random(seed)
    policy = _policy(name)
    live: list[str] = []
    for i in range(steps):
        if live and rng.random() < 0.4:
            key = live.pop(rng.randrange(len(live)))
            policy.release(key)
            record = cache.containers[key]
            record.state = "exited"
            if rng.random() < 0.5:
                cache.remove_container(key)
                cache.remove_pod(record.pod_id)
        else:
            key = f"k{i}"
            w = _workload(rng, key)
            cache.add_pod(PodRecord(id=w.pod, name=w.pod, namespace=w.namespace))
            record = ContainerRecord(key=key, pod_id=w.pod, name="c", workload=w)
            cache.add_container(record)
            policy.allocate(w)
            if rng.random() < 0.5:  # as the engine does after each call; changes may follow
                cache.settle([key], policy.assignment)
            if rng.random() < 0.8:
                cache.set_id(key, f"id-{key}")
                record.resources = {"cpuset_cpus": str(policy.resources(key).cpuset_cpus)}
            live.append(key)
        _check(cache, name, policy)


@pytest.mark.parametrize("name", POLICIES)
def test_every_save_after_a_change_holds_it(tmp_path, name):
    _churn(name, Cache(tmp_path))


def test_the_check_catches_a_save_that_keeps_a_changed_assignment(tmp_path, monkeypatch):
    """What the test above would see of a table that kept each key's first text (a
    balloon grows: its members' assignments change without their keys changing)."""
    def by_key(self, assignments):
        for k, a in assignments.items():
            if k not in self._texts:
                self._set(k, a)
        return [self._texts[k] for k in assignments]

    monkeypatch.setattr(statefile.AssignmentTable, "entries", by_key)
    with pytest.raises(AssertionError):
        _churn("balloons", Cache(tmp_path))


def test_an_unchanged_assignment_is_not_encoded_again(tmp_path, monkeypatch):
    policy = _policy("static")
    cache = Cache(tmp_path)
    for i in range(5):
        policy.allocate(Workload(key=f"k{i}", namespace="default", pod="p", name=f"c{i}", qos=QoS.BESTEFFORT))
    first = dict(policy.assignments())
    assert policy.assignments()["k0"] is first["k0"]  # the pool policies hand out the same object
    cache.save("static", first)
    encoded: list[str] = []
    real = statefile.entry
    monkeypatch.setattr(statefile, "entry", lambda k, v: encoded.append(k) or real(k, v))
    policy.allocate(Workload(key="k9", namespace="default", pod="p", name="c9", qos=QoS.GUARANTEED,
                             cpu_request=2000, cpu_limit=2000))
    _check(cache, "static", policy)
    assert encoded == ["k9"]  # the new one only: the shared ones' assignments did not change
    # Equal but built anew (a policy without stable objects): kept too; changed: encoded.
    cache.save("static", {**first, "k0": Assignment("shared"), "k1": Assignment("shared", CPUSet("3"))})
    assert encoded == ["k9", "k1"]


def test_settle_encodes_ahead_of_the_save(tmp_path, monkeypatch):
    policy = _policy("static")
    cache = Cache(tmp_path)
    cache.save("static", policy.assignments())
    w = Workload(key="k", namespace="default", pod="p", name="c", qos=QoS.GUARANTEED,
                 cpu_request=1000, cpu_limit=1000)
    cache.add_pod(PodRecord(id="p", name="p", namespace="default"))
    cache.add_container(ContainerRecord(key="k", pod_id="p", name="c", workload=w, id="cid"))
    policy.allocate(w)
    encoded: list[str] = []
    real = statefile.entry
    counting = lambda k, v: encoded.append(k) or real(k, v)  # noqa: E731
    monkeypatch.setattr(statefile, "entry", counting)
    monkeypatch.setattr(cache_module, "entry", counting)  # the records' encoding
    cache.settle(["k"], policy.assignment)
    assert sorted(encoded) == ["k", "k", "p"]  # the container's record and assignment, the pod's record
    encoded.clear()
    _check(cache, "static", policy)
    assert encoded == []  # the save found them ready


def test_settle_leaves_a_large_batch_to_the_save(tmp_path, monkeypatch):
    cache = Cache(tmp_path)
    w = Workload(key="k", namespace="default", pod="p", name="c", qos=QoS.BESTEFFORT)
    n = cache_module.SETTLE_MOST + 1
    for i in range(n):
        cache.add_container(ContainerRecord(key=f"k{i}", pod_id="p", name="c", workload=w, id=f"id{i}"))
    cache.save("static", {})
    for c in cache:  # a pool change: every container's resources set
        c.resources = {"cpuset_cpus": "0-1"}
    encoded: list[str] = []
    real = cache_module.entry
    monkeypatch.setattr(cache_module, "entry", lambda k, v: encoded.append(k) or real(k, v))
    cache.settle()
    assert encoded == []
    cache.save("static", {})
    assert len(encoded) == n
    assert all(c["resources"] == {"cpuset_cpus": "0-1"} for c in json.loads(cache.path.read_bytes())["containers"].values())


def test_a_save_without_changes_reuses_the_tables(tmp_path):
    cache = Cache(tmp_path)
    w = Workload(key="k", namespace="default", pod="p", name="c", qos=QoS.BESTEFFORT)
    cache.add_pod(PodRecord(id="p", name="p", namespace="default"))
    cache.add_container(ContainerRecord(key="k", pod_id="p", name="c", workload=w, id="cid"))
    one = cache.snapshot("static", {})
    two = cache.snapshot("static", {})
    assert one.pods is two.pods and one.containers is two.containers
    cache.containers["k"].state = "running"
    three = cache.snapshot("static", {})
    assert three.containers is not two.containers and b'"running"' in three.containers[0]
    assert two.containers[0] != three.containers[0]  # a list handed out is never changed


def test_records_leave_the_state_with_the_cache_and_its_views_are_read_only(tmp_path):
    cache = Cache(tmp_path)
    w = Workload(key="k", namespace="default", pod="p", name="c", qos=QoS.BESTEFFORT)
    pod = PodRecord(id="p", name="p", namespace="default")
    cache.add_pod(pod)
    record = ContainerRecord(key="k", pod_id="p", name="c", workload=w, id="cid")
    cache.add_container(record)
    cache.save("static", {})
    cache.remove_pod("p")
    record.state = "running"  # a record the cache no longer holds changes nothing saved
    pod.labels = {"a": "b"}
    data = _check(cache, "static", _policy("static"))
    assert data["pods"] == {} and data["containers"] == {}
    with pytest.raises(TypeError):
        cache.containers["k"] = record  # type: ignore[index]
    # A record replaced under its key keeps the key's place, and the old one is let go.
    for key in ("a", "b"):
        cache.add_container(ContainerRecord(key=key, pod_id="p", name=key, workload=w, id=f"id-{key}"))
    old = cache.containers["a"]
    cache.add_container(ContainerRecord(key="a", pod_id="p", name="a2", workload=w, id="id-a2"))
    old.state = "running"
    data = _check(cache, "static", _policy("static"))
    assert list(data["containers"]) == ["a", "b"] and data["containers"]["a"]["name"] == "a2"
    assert cache.by_id("id-a") is None and cache.by_id("id-a2").name == "a2"


def test_adoption_replaces_the_pods_and_load_the_whole_state(tmp_path):
    cache = Cache(tmp_path)
    w = Workload(key="k", namespace="default", pod="p", name="c", qos=QoS.BESTEFFORT)
    cache.add_pod(PodRecord(id="old", name="old", namespace="default"))
    cache.add_container(ContainerRecord(key="k", pod_id="p", name="c", workload=w, id="cid"))
    kept = PodRecord(id="p", name="p", namespace="default")
    cache.set_pods({"p": kept})
    kept.uid = "u1"
    data = _check(cache, "static", _policy("static"))
    assert list(data["pods"]) == ["p"] and data["pods"]["p"]["uid"] == "u1"
    fresh = Cache(tmp_path)
    fresh.load()
    fresh.containers["k"].state = "running"
    assert b'"running"' in fresh.snapshot("static", {}).encode()


def test_a_short_write_is_completed(tmp_path, monkeypatch):
    parts = [b"{", b'"a":' + b"x" * 5000, b"}"] * 700  # more pieces than one writev takes
    real = statefile.os.writev
    monkeypatch.setattr(statefile.os, "writev", lambda fd, batch: real(fd, batch[:3]))
    statefile.write_atomically(tmp_path / "f", parts)
    assert (tmp_path / "f").read_bytes() == b"".join(parts)



def test_a_save_made_while_a_deferred_write_is_in_flight_waits_and_is_the_one_kept(tmp_path, monkeypatch):
    """A deferred save's thread cannot be cancelled (engine/saves.py): at a clean shutdown
    or a policy switch the synchronous save meets it still writing. The two never write
    the same temporary file at once, and the older state never replaces the newer."""
    import threading

    cache = Cache(tmp_path)
    cache.add_pod(PodRecord(id="p1", name="old", namespace="default", uid="u1"))
    older = cache.snapshot("static", {})
    real = statefile.write_atomically
    entered, go = threading.Event(), threading.Event()
    active, most = [0], [0]

    def write(path, parts):
        active[0] += 1
        most[0] = max(most[0], active[0])
        if threading.current_thread() is deferred:
            entered.set()
            go.wait(10)
        real(path, parts)
        active[0] -= 1

    monkeypatch.setattr(cache_module, "write_atomically", write)
    deferred = threading.Thread(target=cache.write, args=(older,))
    deferred.start()
    assert entered.wait(10)
    cache.add_pod(PodRecord(id="p2", name="new", namespace="default", uid="u2"))
    closing = threading.Thread(target=cache.save, args=("static", {}))  # Saves.now at shutdown
    closing.start()
    closing.join(0.2)  # blocked behind the deferred write (or, unguarded, already done)
    go.set()
    deferred.join(10)
    closing.join(10)
    assert most[0] == 1
    assert set(json.loads((tmp_path / "state.json").read_text())["pods"]) == {"p1", "p2"}
