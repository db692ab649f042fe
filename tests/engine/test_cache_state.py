"""Persisted state: atomic, versioned; a bad file is moved aside, never fatal."""

import dataclasses
import json
import os
import re

from cri_resmgr.engine.cache import Cache, ContainerRecord, PodRecord
from cri_resmgr.policy.api import Assignment, QoS, Workload
from cri_resmgr.topology.cpuset import CPUSet


def _filled(tmp_path) -> Cache:
    c = Cache(tmp_path)
    c.add_pod(PodRecord(id="p1", name="web", namespace="default", cgroup_parent="/kubepods/podu",
                        labels={"app": "web"}))
    w = Workload(key="p1:c:0", namespace="default", pod="web", name="c", qos=QoS.GUARANTEED,
                 cpu_request=2000, cpu_limit=2000, labels={"app": "web"},
                 pod_annotations={"cri-resource-manager.intel.com/memory-type": "dram"})
    c.add_container(ContainerRecord(key="p1:c:0", pod_id="p1", name="c", workload=w, id="cid1",
                                    state="running", resources={"cpu_shares": "2048"}))
    return c


def test_save_and_load_round_trip(tmp_path):
    c = _filled(tmp_path)
    c.save("static", {"p1:c:0": Assignment("exclusive", CPUSet("2-3"), details={"mems": "0"})})
    assert oct(os.stat(tmp_path / "state.json").st_mode & 0o777) == "0o600"
    assert not (tmp_path / "state.json.tmp").exists()
    fresh = Cache(tmp_path)
    saved = fresh.load()
    assert saved.policy == "static"
    assert saved.assignments == {"p1:c:0": Assignment("exclusive", CPUSet("2-3"), details={"mems": "0"})}
    assert fresh.by_id("cid1").workload == c.by_id("cid1").workload
    assert fresh.by_id("cid1").workload.annotation("memory-type") == "dram"
    assert fresh.pods["p1"].cgroup_parent == "/kubepods/podu"
    assert fresh.pods["p1"].labels == {"app": "web"}


def test_corrupt_foreign_and_future_files_are_moved_aside(tmp_path, caplog):
    for content in ("{not json", json.dumps({"format": "something-else"}),
                    json.dumps({"format": "cri-resmgr-state", "version": 99}),
                    json.dumps({"format": "cri-resmgr-state", "version": 1, "pods": {"x": {"bad": 1}}})):
        (tmp_path / "state.json").write_text(content)
        c = Cache(tmp_path)
        assert c.load() is None
        assert not (tmp_path / "state.json").exists()
        assert c.containers == {} and c.pods == {}
    aside = list(tmp_path.glob("state.json.bad-*"))
    assert len(aside) >= 1
    # Named with a readable UTC time (was seconds since the epoch): state.json.bad-20261127T141502Z
    assert all(re.fullmatch(r"state\.json\.bad-\d{8}T\d{6}Z", p.name) for p in aside), aside
    assert "is unusable" in caplog.text and "rebuilding from the runtime" in caplog.text


def test_no_state_dir_means_no_persistence(tmp_path):
    c = Cache(None)
    c.save("static", {})
    assert c.load() is None


def test_remove_pod_drops_its_containers(tmp_path):
    c = _filled(tmp_path)
    gone = c.remove_pod("p1")
    assert [g.key for g in gone] == ["p1:c:0"]
    assert c.by_id("cid1") is None and c.containers == {}


def test_of_pod_follows_adds_removes_replacements_and_loads(tmp_path):
    c = _filled(tmp_path)
    w = c.containers["p1:c:0"].workload

    def record(key: str, pod: str, cid: str = "") -> ContainerRecord:
        return ContainerRecord(key=key, pod_id=pod, name=key, workload=w, id=cid)

    for key, pod in (("p2:a:0", "p2"), ("p1:d:0", "p1"), ("p2:b:0", "p2")):
        c.add_container(record(key, pod))
    assert [r.key for r in c.of_pod("p1")] == ["p1:c:0", "p1:d:0"]  # in the order added
    assert [r.key for r in c.of_pod("p2")] == ["p2:a:0", "p2:b:0"]
    again = record("p2:a:0", "p2", "cid2")  # a retried create: the same key, a new record
    c.add_container(again)
    assert c.of_pod("p2") == [again, c.containers["p2:b:0"]]
    c.remove_container("p1:c:0")
    assert [r.key for r in c.of_pod("p1")] == ["p1:d:0"]
    assert [r.key for r in c.remove_pod("p2")] == ["p2:a:0", "p2:b:0"]
    assert c.of_pod("p2") == [] and c.of_pod("nope") == []
    c.add_container(record("p1:c:0", "p1", "cid1"))
    c.save("static", {})
    fresh = Cache(tmp_path)
    fresh.add_container(record("p3:x:0", "p3"))  # dropped by the load, as the rest of its records
    fresh.load()
    assert [r.key for r in fresh.of_pod("p1")] == ["p1:c:0"]
    assert fresh.of_pod("p3") == []


def _plain_state(c: Cache, policy: str, assignments: dict) -> bytes:
    """The state file as the relay wrote it before saves reused each record's JSON:
    one json.dumps of the whole state, from its records' fields."""
    def container(r):
        w = dataclasses.asdict(r.workload)
        w["qos"] = r.workload.qos.value
        return {**{f.name: getattr(r, f.name) for f in dataclasses.fields(r)}, "workload": w}

    data = json.loads((c.path).read_text())
    return json.dumps({"format": "cri-resmgr-state", "version": 1, "saved": data["saved"], "policy": policy,
                       "pods": {p.id: dataclasses.asdict(p) for p in c.pods.values()},
                       "containers": {r.key: container(r) for r in c.containers.values() if r.id},
                       "assignments": {k: a.to_json() for k, a in assignments.items()}},
                      separators=(",", ":")).encode()


def test_state_file_bytes_are_one_json_dumps_of_the_state_and_follow_changes(tmp_path):
    c = _filled(tmp_path)
    c.add_pod(PodRecord(id="p2", name="caf\u00e9 \"q\"", namespace="ns", annotations={"k\u00fc": "v\n"}))
    w = Workload(key="p2:d:0", namespace="ns", pod="caf\u00e9", name="d", qos=QoS.BESTEFFORT)
    c.add_container(ContainerRecord(key="p2:d:0", pod_id="p2", name="d", workload=w))  # no id yet: not saved
    assignments = {"p1:c:0": Assignment("exclusive", CPUSet("2-3"), details={"b": 1, "a": [1, "x"]}),
                   "p2:d:0": Assignment("shared")}
    c.save("static", assignments)
    assert (tmp_path / "state.json").read_bytes() == _plain_state(c, "static", assignments)
    # Changes after a save are in the next one: every field set, and assignments
    # changed, gone, or equal but with their details' keys in another order.
    c.set_id("p2:d:0", "cid2")
    r = c.by_id("cid1")
    r.resources = {**r.resources, "cpuset_cpus": "0-1"}
    r.state = "exited"
    c.pods["p1"].labels = {"app": "db"}
    assignments = {"p1:c:0": Assignment("exclusive", CPUSet("2-3"), details={"a": [1, "x"], "b": 1}),
                   "p2:d:0": Assignment("shared", CPUSet("5"))}
    c.save("static", assignments)
    saved = (tmp_path / "state.json").read_bytes()
    assert saved == _plain_state(c, "static", assignments)
    assert b'"cpuset_cpus":"0-1"' in saved and b'"cid2"' in saved and b'"app":"db"' in saved
    del assignments["p2:d:0"]
    c.remove_container("p2:d:0")
    c.save("static", assignments)
    assert (tmp_path / "state.json").read_bytes() == _plain_state(c, "static", assignments)
    assert Cache(tmp_path).load().assignments == assignments


def _valid_state(tmp_path) -> dict:
    c = _filled(tmp_path)
    c.save("static", {"p1:c:0": Assignment("exclusive", CPUSet("2-3"))})
    return json.loads((tmp_path / "state.json").read_text())


def _hostile_states(good: dict) -> dict[str, str]:
    """Issue 28.5: files every start used to exit 1 on (RecursionError, a hang on a
    hundred million CPUs), and fields of the wrong type a policy would trip over later."""
    def with_(path: tuple, value) -> str:
        d = json.loads(json.dumps(good))
        target = d
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
        return json.dumps(d)

    return {
        "200000-deep": "[" * 200_000 + "]" * 200_000,
        "deep-details": with_(("assignments", "p1:c:0", "details"), json.loads("[" * 500 + "]" * 500)),
        "cpus-1-99999999": with_(("assignments", "p1:c:0", "exclusive"), "1-99999999"),
        "cpus-4-billion": with_(("assignments", "p1:c:0", "exclusive"), "0-4294967295"),
        "5000-digits": with_(("containers", "p1:c:0", "workload", "cpu_request"), int("9" * 4000)),
        "request-a-list": with_(("containers", "p1:c:0", "workload", "cpu_request"), [1]),
        "labels-a-list": with_(("pods", "p1", "labels"), [1]),
        "annotation-an-object": with_(("containers", "p1:c:0", "workload", "pod_annotations"), {"a": {"b": 1}}),
        "qos-huge": with_(("containers", "p1:c:0", "workload", "qos"), "x" * 100_000),
        "pods-a-list": with_(("pods",), []),
        "unknown-field": with_(("containers", "p1:c:0", "colour"), "red"),
        "not-utf8": "\udcff",
    }


def test_hostile_state_files_are_moved_aside_in_one_short_line(tmp_path, caplog):
    good = _valid_state(tmp_path / "good")
    for name, text in _hostile_states(good).items():
        d = tmp_path / name
        d.mkdir()
        (d / "state.json").write_bytes(text.encode("utf-8", "surrogateescape"))
        caplog.clear()
        assert Cache(d).load() is None, name
        assert not (d / "state.json").exists(), name
        assert len(list(d.glob("state.json.bad-*"))) == 1, name
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "is unusable" in lines[0] and len(lines[0]) < 500, (name, lines)
