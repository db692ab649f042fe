"""Persisted state: atomic, versioned; a bad file is moved aside, never fatal."""

import json
import os

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
    assert len(list(tmp_path.glob("state.json.bad-*"))) >= 1
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
