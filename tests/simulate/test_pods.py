"""YAML pods into the calls kubelet makes: the same derivation as the harness's kubelet,
and errors that name the file, the pod and the field."""

from __future__ import annotations

import pytest

from cri_resmgr.simulate.calls import WorkloadError
from cri_resmgr.simulate.podcalls import linux_resources, qos_class
from cri_resmgr.simulate.pods import parse_pods, pod_calls, read_pods
from tests.harness import podspec

PODS = """
- name: web
  containers:
  - name: app
    resources: {requests: {cpu: 2, memory: 1Gi}, limits: {cpu: 2, memory: 1Gi}}
- name: side
  namespace: batch
  annotations: {cri-resource-manager.intel.com/prefer-shared-cpus: "true"}
  containers:
  - {name: a, resources: {requests: {cpu: 500m}}}
  - {name: b, resources: {limits: {cpu: 1500m, memory: 64Mi}}}
  - {name: c}
"""


def test_short_form_list():
    pods = parse_pods(PODS, "pods.yaml")
    assert [str(p) for p in pods] == ["default/web", "batch/side"]
    assert qos_class(pods[0]) == "Guaranteed" and qos_class(pods[1]) == "Burstable"
    calls = pod_calls(pods)
    assert [c.method for c in calls] == ["RunPodSandbox", "CreateContainer", "StartContainer", "RunPodSandbox"] + \
        ["CreateContainer", "StartContainer"] * 3
    side = calls[3].request.config
    assert side.linux.cgroup_parent.startswith("/kubepods/burstable/pod")
    assert side.annotations["cri-resource-manager.intel.com/prefer-shared-cpus"] == "true"


@pytest.mark.parametrize("requests, limits", [
    ({}, {}), ({"cpu": "250m"}, {}), ({}, {"cpu": "1500m", "memory": "64Mi"}), ({"cpu": "2"}, {"cpu": "2"}),
    ({"cpu": "100m", "memory": "10Mi"}, {"cpu": "300m", "memory": "20Mi"}), ({"cpu": "1m"}, {}),
])
def test_same_linux_resources_as_the_harness_kubelet(requests, limits):
    text = f"- name: p\n  containers:\n  - name: c\n    resources: {{requests: {requests}, limits: {limits}}}\n"
    mine = parse_pods(text, "x")[0]
    theirs = podspec.PodSpec(name="p", containers=[podspec.ContainerSpec(name="c", requests=requests,
                                                                         limits=limits)])
    want = podspec.container_resources(theirs, theirs.containers[0], 1 << 34)
    got = linux_resources(mine.containers[0])
    assert (got.cpu_shares, got.cpu_quota, got.cpu_period, got.memory_limit_in_bytes) == \
        (want.cpu_shares, want.cpu_quota, want.cpu_period, want.memory_limit_in_bytes)
    assert qos_class(mine) == podspec.qos_class(theirs)


def test_kubectl_list_and_documents_with_init_containers():
    text = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: db, namespace: prod, labels: {app: db}}
  spec:
    initContainers: [{name: init, resources: {limits: {cpu: 1, memory: 10Mi}}}]
    containers: [{name: pg, resources: {limits: {cpu: 4, memory: 4Gi}}}]
---
kind: Pod
metadata: {name: cache}
spec: {containers: [{name: redis}]}
"""
    pods = parse_pods(text, "pods.yaml")
    assert [str(p) for p in pods] == ["prod/db", "default/cache"]
    methods = [c.method for c in pod_calls(pods)]
    # the init container is created, started and seen exited before the app container
    assert methods[:5] == ["RunPodSandbox", "CreateContainer", "StartContainer", "ContainerStatus", "CreateContainer"]


@pytest.mark.parametrize("text, says", [
    ("- name: [", "pods.yaml: not YAML at line 1"),
    ("", "pods.yaml: no pods"),
    ("- 42", "pods.yaml: pod 1: expected a pod"),
    ("- {containers: [{name: c}]}", "pods.yaml: pod 1: no name"),
    ("- {name: p, containers: []}", "pod 1 (default/p): containers: expected a list"),
    ("- {name: p, containerz: []}", "pod 1: unknown keys containerz"),
    ("- {name: p, containers: [{name: c, resources: {limits: {cpu: lots}}}]}",
     "pod 1 (default/p): containers[0] (c): resources.limits.cpu:"),
    ("- {name: p, containers: [{name: c, resources: {requests: {memory: [1]}}}]}",
     "containers[0] (c): resources.requests.memory: expected a quantity"),
    ("- {name: p, containers: [{name: c}, {name: c}]}", "container names repeat"),
    ("- {name: p, containers: [{name: c}]}\n- {name: p, containers: [{name: d}]}", "pod 2: default/p is listed twice"),
    ("- {name: p, annotations: {a: {b: c}}, containers: [{name: c}]}", "pod 1 (default/p): annotations: 'a'"),
])
def test_bad_pods_name_the_file_pod_and_field(text, says):
    with pytest.raises(WorkloadError) as e:
        parse_pods(text, "pods.yaml")
    assert says in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read pods file .*none.yaml"):
        read_pods(str(tmp_path / "none.yaml"))
