"""Where a container's cgroups are, read from a verbose ContainerStatus' info: whatever
shape the runtime's JSON has, the answer is a Where (empty when it tells nothing), never
an exception that would stop a reconcile or a configuration's class sync."""

from __future__ import annotations

import json

import pytest

from cri_resmgr.classes.cgroups import Where
from cri_resmgr.engine.classes import where_from_info


def test_pid_and_cgroups_path_as_containerd_tells_them():
    info = {"info": json.dumps({"pid": 42, "runtimeSpec": {"linux": {"cgroupsPath": "/kubepods/pod1/c1"}}})}
    assert where_from_info(info) == Where(pid=42, cgroups_path="/kubepods/pod1/c1")


@pytest.mark.parametrize("text", [
    "", "not json", "[]", "7", json.dumps({"pid": "42"}), json.dumps({"runtimeSpec": []}),
    json.dumps({"runtimeSpec": "spec"}), json.dumps({"runtimeSpec": {"linux": ["x"]}}),
    json.dumps({"runtimeSpec": {"linux": {"cgroupsPath": 5}}}), json.dumps({"pid": True}),
])
def test_odd_shapes_tell_nothing(text):
    assert where_from_info({"info": text}) == Where()
