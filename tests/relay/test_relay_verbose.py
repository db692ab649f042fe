"""The runtimes' verbose status JSON, read at the relay's edge (relay/verbose.py): whatever
shape it has, each reader answers (nothing when it tells nothing), never raises, so an odd
runtime cannot stop an adoption, a reconcile or a configuration's class sync."""

from __future__ import annotations

import json

import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.relay import verbose

CONTAINERD = {"pid": 42, "runtimeSpec": {"linux": {
    "cgroupsPath": "/kubepods/pod1/c1",
    "resources": {"cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-1", "mems": "0"},
                  "memory": {"limit": 1 << 30}}}}}


def _info(data: object) -> dict[str, str]:
    return {"info": json.dumps(data)}


def test_a_containerd_container_as_it_tells_it():
    info = _info(CONTAINERD)
    assert verbose.pid(info) == 42
    assert verbose.cgroups_path(info) == "/kubepods/pod1/c1"
    assert verbose.resources(info) == pb.LinuxContainerResources(
        cpu_shares=512, cpu_quota=50000, cpu_period=100000, memory_limit_in_bytes=1 << 30,
        cpuset_cpus="0-1", cpuset_mems="0")


def test_unlimited_quota_and_memory_are_no_limit():
    spec = {"runtimeSpec": {"linux": {"resources": {"cpu": {"quota": -1}, "memory": {"limit": -1}}}}}
    assert verbose.resources(_info(spec)) == pb.LinuxContainerResources()


def test_the_cgroup_parent_as_containerd_and_cri_o_tell_it():
    assert verbose.cgroup_parent(_info({"config": {"linux": {"cgroup_parent": "/kubepods/burstable/pod1"}}})) \
        == "/kubepods/burstable/pod1"
    crio = {"runtimeSpec": {"annotations": {verbose.CRIO_CGROUP_PARENT: "kubepods-pod1.slice"}}}
    assert verbose.cgroup_parent(_info(crio)) == "kubepods-pod1.slice"


@pytest.mark.parametrize("text", [
    "", "not json", "[]", "[1]", "7", "null", json.dumps({"pid": "42"}), json.dumps({"pid": True}),
    json.dumps({"pid": -5}), json.dumps({"runtimeSpec": []}), json.dumps({"runtimeSpec": "spec"}),
    json.dumps({"runtimeSpec": {"linux": ["x"]}}), json.dumps({"runtimeSpec": {"linux": {"cgroupsPath": 5}}}),
    json.dumps({"runtimeSpec": {"linux": {"resources": {"cpu": "x", "memory": [1]}}}}),
    json.dumps({"runtimeSpec": {"linux": {"resources": {"cpu": {"shares": "many", "quota": {}}}}}}),
    json.dumps({"config": [], "runtimeSpec": {"annotations": "x"}}), json.dumps({"config": {"linux": 3}}),
    # Numbers no int64 holds (the CRI fields are int64): nothing, not protobuf's ValueError, which
    # would fail the reconcile's pid lookup and the class sync that never needed the resources.
    json.dumps({"runtimeSpec": {"linux": {"resources": {"cpu": {"shares": 2**64 - 1, "period": 1e300,
                                                                "quota": -(2**70)}, "memory": {"limit": 2**63}}}}}),
    "[" * 100_000 + "]" * 100_000,
])
def test_odd_shapes_tell_nothing(text):
    info = {"info": text}
    assert verbose.pid(info) == 0
    assert verbose.cgroups_path(info) == ""
    assert verbose.cgroup_parent(info) == ""
    assert verbose.resources(info) == pb.LinuxContainerResources()


def test_no_info_at_all_tells_nothing():
    assert (verbose.pid({}), verbose.cgroups_path({}), verbose.cgroup_parent({})) == (0, "", "")
    assert verbose.resources({}) == pb.LinuxContainerResources()
