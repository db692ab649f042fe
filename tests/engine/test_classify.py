"""Classification: QoS from cgroup parents, requests from the annotation or the CRI."""

import pytest

from cri_resmgr.engine import classify
from cri_resmgr.policy.api import QoS


@pytest.mark.parametrize("parent,qos", [
    ("/kubepods/pod1234", QoS.GUARANTEED),
    ("/kubepods/burstable/pod1234", QoS.BURSTABLE),
    ("/kubepods/besteffort/pod1234/", QoS.BESTEFFORT),
    ("/crirm-test-ab/kubepods/burstable/podx", QoS.BURSTABLE),
    ("kubepods-pod12_34.slice", QoS.GUARANTEED),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice", QoS.BURSTABLE),
    ("kubepods-besteffort-pod12_34.slice", QoS.BESTEFFORT),
    ("/system.slice/foo", None),
    ("", None),
])
def test_qos_from_cgroup_parent(parent, qos):
    assert classify.qos_from_cgroup_parent(parent) is qos


def test_cri_estimate_inverts_kubelet():
    r = classify.requirements_from_cri(cpu_shares=1024, cpu_quota=200000, cpu_period=100000,
                                       memory_limit=1 << 30)
    assert (r.cpu_request, r.cpu_limit, r.memory_limit) == (1000, 2000, 1 << 30)
    assert classify.requirements_from_cri(2, 0, 100000, 0).cpu_request == 0  # besteffort's minimum
    assert classify.requirements_from_cri(102, 0, 0, 0).cpu_request == 100  # 100m -> 102 shares


def test_effective_annotation_precedence():
    pod = {"cri-resource-manager.intel.com/prefer-shared-cpus": "false",
           "cri-resource-manager.intel.com/prefer-shared-cpus/pod": "true",
           "cri-resource-manager.intel.com/prefer-shared-cpus/container.b": "false"}
    get = lambda c: classify.effective_annotation(pod, {}, "prefer-shared-cpus", c)  # noqa: E731
    assert get("a") == "true"   # K/pod beats K
    assert get("b") == "false"  # K/container.C beats K/pod
    assert classify.effective_annotation({"cri-resource-manager.intel.com/prefer-shared-cpus": "1"}, {},
                                         "prefer-shared-cpus", "z") == "1"


def _w(**kw):
    args = dict(key="k", namespace="default", pod="p", container="c", cgroup_parent="/kubepods/podu",
                pod_annotations={}, container_annotations={},
                cri_resources=classify.Requirements(cpu_request=1000, cpu_limit=1000, memory_limit=1 << 20))
    args.update(kw)
    return classify.workload(**args)


def test_workload_from_annotation_wins_over_cri():
    w = _w(pod_annotations={"intel.com/resources": '{"containers": {"c": {"requests": {"cpu": "2"}, '
                                                   '"limits": {"cpu": "2", "memory": "1Gi"}}}}'})
    assert (w.cpu_request, w.cpu_limit, w.memory_limit) == (2000, 2000, 1 << 30)


def test_bad_annotations_are_logged_and_ignored(caplog):
    w = _w(pod_annotations={"intel.com/resources": "[1,2",
                            "cri-resource-manager.intel.com/prefer-isolated-cpus": "sometimes"})
    assert w.cpu_request == 1000 and w.prefer_isolated is None
    assert "default/p:c: ignoring annotation intel.com/resources" in caplog.text
    assert "prefer-isolated-cpus: not a boolean: 'sometimes'" in caplog.text


def test_reserved_namespaces_are_globs():
    assert _w(namespace="kube-system").system
    assert _w(namespace="monitoring-a", reserved_namespaces=("kube-system", "monitoring-*")).system
    assert not _w(namespace="default").system


def test_labels_and_our_annotations_are_kept_for_policies():
    w = _w(labels={"app": "db"},
           pod_annotations={"intel.com/resources": "{}", "big/blob": "x" * 1000,
                            "balloon.balloons.cri-resource-manager.intel.com/pod": "dataplane"},
           container_annotations={"cri-resource-manager.intel.com/memory-type": "pmem"})
    assert w.labels == {"app": "db"}
    assert w.pod_annotations == {"balloon.balloons.cri-resource-manager.intel.com/pod": "dataplane"}
    assert w.annotation("memory-type") == "pmem"
    assert w.effective_annotation("balloon.balloons.cri-resource-manager.intel.com") == "dataplane"


def test_pod_level_resources_make_a_container_without_its_own_not_besteffort():
    # KEP-2837: requests on the pod, none on the container; the cgroup parent says nothing here.
    from cri_resmgr._proto import runtime_v1_pb2 as pb

    linux = pb.LinuxPodSandboxConfig(resources=pb.LinuxContainerResources(
        cpu_shares=2048, cpu_quota=200000, cpu_period=100000, memory_limit_in_bytes=1 << 30))
    pod = classify.pod_level(linux)
    assert pod is not None and (pod.cpu_request, pod.cpu_limit) == (2000, 2000)
    none = classify.requirements_from_cri(2, 0, 100000, 0)
    common = dict(key="k", namespace="ns", pod="p", container="c", cgroup_parent="", pod_annotations={},
                  container_annotations={}, cri_resources=none)
    w = classify.workload(**common, pod_resources=pod)
    assert w.qos is QoS.GUARANTEED and w.cpu_request == 0  # its class, but no share of the pod's budget
    assert classify.workload(**common).qos is QoS.BESTEFFORT  # without pod-level resources
    assert classify.pod_level(pb.LinuxPodSandboxConfig()) is None
    # The cgroup parent kubelet chose wins whenever it says something.
    assert classify.workload(**{**common, "cgroup_parent": "/kubepods/burstable/podx"}, pod_resources=pod).qos \
        is QoS.BURSTABLE


def test_pod_level_resources_give_the_pods_qos_class_to_each_container_as_kubelet_sends_them():
    # kubelet (getCPULimit, getMemoryLimit) gives a container without a limit of its own the
    # pod's limits in its CRI resources; the pod's QoS class comes from its pod-level
    # resources alone (KEP-2837 "QoS Changes"), whatever its containers have.
    from cri_resmgr._proto import runtime_v1_pb2 as pb

    pod = classify.pod_level(pb.LinuxPodSandboxConfig(resources=pb.LinuxContainerResources(
        cpu_shares=2048, cpu_quota=200000, cpu_period=100000, memory_limit_in_bytes=1 << 30)))
    common = dict(key="k", namespace="ns", pod="p", container="c", cgroup_parent="", pod_annotations={},
                  container_annotations={}, pod_resources=pod)
    none_of_its_own = classify.requirements_from_cri(2, 200000, 100000, 1 << 30)
    assert classify.workload(**common, cri_resources=none_of_its_own).qos is QoS.GUARANTEED  # was BURSTABLE
    a_request_of_its_own = classify.requirements_from_cri(512, 200000, 100000, 1 << 30)
    assert classify.workload(**common, cri_resources=a_request_of_its_own).qos is QoS.GUARANTEED
    requests_only = classify.pod_requirements(2048, 0, 100000, 0)
    assert classify.workload(**{**common, "pod_resources": requests_only}, cri_resources=none_of_its_own).qos \
        is QoS.BURSTABLE
