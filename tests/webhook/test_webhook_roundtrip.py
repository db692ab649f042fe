"""Round trip: pod spec -> the real webhook over TLS -> JSONPatch applied -> the
relay's classification of each container."""

from __future__ import annotations

from cri_resmgr.engine import classify
from cri_resmgr.policy.api import QoS


def _classify(pod: dict, name: str, cgroup_parent: str):
    annotations = pod["metadata"].get("annotations", {})
    return classify.workload(
        key=name, namespace=pod["metadata"]["namespace"], pod=pod["metadata"]["name"], container=name,
        cgroup_parent=cgroup_parent, pod_annotations=annotations, container_annotations={},
        # What the CRI alone would say: nothing useful (kubelet sent no limits).
        cri_resources=classify.Requirements(cpu_request=0, source="cri"))


def test_pod_spec_reaches_the_relays_classification(webhook, support):
    pod = support.pod(
        "roundtrip",
        containers=[
            support.container("app", requests={"cpu": "1500m", "memory": "1Gi", "example.com/gpu": "1"},
                              limits={"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "64Mi",
                                      "example.com/gpu": "1"}),
            support.container("limits-only", limits={"cpu": "3", "memory": "256Mi"}),
            support.container("nothing"),
        ],
        init_containers=[support.container("init", requests={"cpu": "250m"})],
    )
    reply = webhook.review(support.admission_review(pod))
    patched = support.apply_json_patch(pod, support.decode_patch(reply))
    assert "intel.com/resources" in patched["metadata"]["annotations"]

    app = _classify(patched, "app", "/kubepods/burstable/podx")
    assert (app.cpu_request, app.cpu_limit) == (1500, 2000)
    assert (app.memory_request, app.memory_limit) == (1 << 30, 1 << 30)
    assert app.qos is QoS.BURSTABLE

    # A limit without a request: Kubernetes defaults the request to the limit.
    only = _classify(patched, "limits-only", "/kubepods/podx")
    assert (only.cpu_request, only.cpu_limit, only.memory_limit) == (3000, 3000, 256 << 20)
    assert only.qos is QoS.GUARANTEED

    nothing = _classify(patched, "nothing", "/kubepods/besteffort/podx")
    assert (nothing.cpu_request, nothing.cpu_limit, nothing.memory_limit) == (0, None, None)

    init = _classify(patched, "init", "/kubepods/burstable/podx")
    assert init.cpu_request == 250


def test_replaced_annotation_wins_over_a_stale_one(webhook, support):
    pod = support.pod("stale", containers=[support.container("c", requests={"cpu": "2"}, limits={"cpu": "2"})],
                      annotations={"intel.com/resources": '{"containers": {"c": {"requests": {"cpu": "1"}}}}'})
    patched = support.apply_json_patch(pod, support.decode_patch(webhook.review(support.admission_review(pod))))
    assert _classify(patched, "c", "/kubepods/podx").cpu_request == 2000
