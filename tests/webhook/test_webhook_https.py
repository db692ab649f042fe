"""AdmissionReview v1 payloads over real HTTPS: each returned JSONPatch is
applied to the pod and the resulting annotation checked."""
from __future__ import annotations

import json
import threading

import pytest

ANNOTATION = "intel.com/resources"


def annotated(webhook, support, pod: dict) -> tuple[dict, dict]:
    """Reviews pod; returns (patched pod, decoded annotation)."""
    reply = webhook.review(support.admission_review(pod))
    assert reply["apiVersion"] == "admission.k8s.io/v1"
    assert reply["kind"] == "AdmissionReview"
    assert reply["response"]["uid"] == "0d6b3c4e-7f0a-4d43-9c1e-2f5b2ab1c001"
    assert reply["response"]["allowed"] is True
    assert "warnings" not in reply["response"]
    patched = support.apply_json_patch(pod, support.decode_patch(reply))
    # The patch touches the annotation only.
    rest_before = {k: v for k, v in pod.items() if k != "metadata"}
    rest_after = {k: v for k, v in patched.items() if k != "metadata"}
    assert rest_after == rest_before
    return patched, json.loads(patched["metadata"]["annotations"][ANNOTATION])


def test_one_container(webhook, support):
    pod = support.pod(containers=[
        support.container("app", requests={"cpu": "250m", "memory": "64Mi"},
                          limits={"cpu": "500m", "memory": "128Mi"}),
    ])
    _, value = annotated(webhook, support, pod)
    assert value == {
        "initContainers": {},
        "containers": {"app": {"requests": {"cpu": "250m", "memory": "64Mi"},
                               "limits": {"cpu": "500m", "memory": "128Mi"}}},
    }
    assert any("default/web: patched" in line for line in webhook.log.lines)


def test_several_containers_keep_their_own_quantities(webhook, support):
    pod = support.pod(containers=[
        support.container("a", requests={"cpu": "1"}, limits={"cpu": "2"}),
        support.container("b", requests={"cpu": "100m", "memory": "1Gi"}),
        support.container("c", requests={"memory": "1.5Gi"}, limits={"memory": "2G"}),
    ])
    _, value = annotated(webhook, support, pod)
    assert value["containers"] == {
        "a": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
        "b": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {}},
        "c": {"requests": {"memory": "1.5Gi"}, "limits": {"memory": "2G"}},
    }


def test_init_containers_listed_apart(webhook, support):
    pod = support.pod(
        containers=[support.container("app", requests={"cpu": "500m"})],
        init_containers=[
            support.container("setup", requests={"cpu": "2"}, limits={"cpu": "2", "memory": "256Mi"}),
            support.container("migrate"),
        ],
    )
    _, value = annotated(webhook, support, pod)
    assert value["initContainers"] == {
        "setup": {"requests": {"cpu": "2"}, "limits": {"cpu": "2", "memory": "256Mi"}},
        "migrate": {"requests": {}, "limits": {}},
    }
    assert value["containers"] == {"app": {"requests": {"cpu": "500m"}, "limits": {}}}


def test_no_resources_at_all(webhook, support):
    bare = support.container("app")
    del bare["resources"]
    pod = support.pod(containers=[bare, support.container("empty")])
    _, value = annotated(webhook, support, pod)
    assert value == {"initContainers": {},
                     "containers": {"app": {"requests": {}, "limits": {}},
                                    "empty": {"requests": {}, "limits": {}}}}


def test_only_limits(webhook, support):
    # The API server defaults requests to limits; a review may still carry
    # limits alone (e.g. from an earlier mutating webhook): copied as they are.
    pod = support.pod(containers=[support.container("app", limits={"cpu": "3", "memory": "1Gi"})])
    _, value = annotated(webhook, support, pod)
    assert value["containers"]["app"] == {"requests": {}, "limits": {"cpu": "3", "memory": "1Gi"}}


def test_extended_resources_and_hugepages(webhook, support):
    resources = {"cpu": "4", "memory": "2Gi", "hugepages-2Mi": "100Mi", "hugepages-1Gi": "2Gi",
                 "intel.com/sriov_netdevice": "1", "example.com/gpu": "2", "ephemeral-storage": "1G"}
    pod = support.pod(containers=[support.container("dpdk", requests=resources, limits=resources)])
    _, value = annotated(webhook, support, pod)
    assert value["containers"]["dpdk"] == {"requests": resources, "limits": resources}


def test_quantities_kept_verbatim(webhook, support):
    odd = {"cpu": "0.5", "memory": "129e6", "example.com/foo": "1k"}
    pod = support.pod(containers=[support.container("app", requests=odd)])
    _, value = annotated(webhook, support, pod)
    assert value["containers"]["app"]["requests"] == odd


def test_existing_annotations_are_kept(webhook, support):
    pod = support.pod(annotations={"a.example/x": "1", "kubectl.kubernetes.io/restartedAt": "now"},
                      containers=[support.container("app", requests={"cpu": "1"})])
    reply = webhook.review(support.admission_review(pod))
    ops = support.decode_patch(reply)
    assert ops == [{"op": "add", "path": "/metadata/annotations/intel.com~1resources",
                    "value": ops[0]["value"]}]
    patched, value = annotated(webhook, support, pod)
    assert patched["metadata"]["annotations"]["a.example/x"] == "1"
    assert patched["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] == "now"
    assert value["containers"]["app"]["requests"] == {"cpu": "1"}


def test_no_annotations_creates_the_map(webhook, support):
    pod = support.pod(containers=[support.container("app", requests={"cpu": "1"})])
    assert "annotations" not in pod["metadata"]
    ops = support.decode_patch(webhook.review(support.admission_review(pod)))
    assert [op["path"] for op in ops] == ["/metadata/annotations"]
    patched, _ = annotated(webhook, support, pod)
    assert list(patched["metadata"]["annotations"]) == [ANNOTATION]


def test_null_annotations_creates_the_map(webhook, support):
    pod = support.pod(annotations=None)
    pod["metadata"]["annotations"] = None
    patched, value = annotated(webhook, support, pod)
    assert list(patched["metadata"]["annotations"]) == [ANNOTATION]
    assert value["containers"] == {"main": {"requests": {}, "limits": {}}}


def test_stale_annotation_is_replaced(webhook, support):
    stale = json.dumps({"containers": {"app": {"requests": {"cpu": "64"}, "limits": {}}}})
    pod = support.pod(annotations={ANNOTATION: stale, "keep": "me"},
                      containers=[support.container("app", requests={"cpu": "1"})])
    ops = support.decode_patch(webhook.review(support.admission_review(pod)))
    assert [op["op"] for op in ops] == ["replace"]
    patched, value = annotated(webhook, support, pod)
    assert value["containers"]["app"]["requests"] == {"cpu": "1"}
    assert patched["metadata"]["annotations"]["keep"] == "me"


def test_generate_name_pod_logged_by_prefix(webhook, support):
    pod = support.pod(name="", generateName="web-5d9c7-", containers=[support.container("app")])
    del pod["metadata"]["name"]
    annotated(webhook, support, pod)
    assert any("default/web-5d9c7-*: patched" in line for line in webhook.log.lines)


@pytest.mark.parametrize("kind,resource", [
    ({"group": "apps", "version": "v1", "kind": "Deployment"},
     {"group": "apps", "version": "v1", "resource": "deployments"}),
    ({"group": "", "version": "v1", "kind": "Service"},
     {"group": "", "version": "v1", "resource": "services"}),
    ({"group": "", "version": "v1", "kind": "Binding"},
     {"group": "", "version": "v1", "resource": "pods"}),
])
def test_non_pod_kinds_allowed_unchanged(webhook, support, kind, resource):
    obj = {"apiVersion": "v1", "kind": kind["kind"], "metadata": {"name": "thing"},
           "spec": {"containers": [{"name": "looks-like-a-pod"}]}}
    reply = webhook.review(support.admission_review(obj, kind=kind, resource=resource))
    assert reply["response"] == {"uid": "0d6b3c4e-7f0a-4d43-9c1e-2f5b2ab1c001", "allowed": True}
    assert any("not patched: not a pod" in line and kind["kind"] in line for line in webhook.log.lines)


def test_pod_update_allowed_unchanged(webhook, support):
    reply = webhook.review(support.admission_review(support.pod(), operation="UPDATE"))
    assert reply["response"] == {"uid": "0d6b3c4e-7f0a-4d43-9c1e-2f5b2ab1c001", "allowed": True}
    assert any("not patched: operation 'UPDATE' is not CREATE" in line for line in webhook.log.lines)


def test_reviews_on_one_kept_alive_connection(webhook, support):
    conn = webhook.connect()
    try:
        for i in range(5):
            pod = support.pod(name=f"p{i}", containers=[support.container("c", requests={"cpu": f"{i + 1}"})])
            reply = webhook.review(support.admission_review(pod, uid=f"uid-{i}"), conn=conn)
            assert reply["response"]["uid"] == f"uid-{i}"
            patched = support.apply_json_patch(pod, support.decode_patch(reply))
            value = json.loads(patched["metadata"]["annotations"][ANNOTATION])
            assert value["containers"]["c"]["requests"] == {"cpu": f"{i + 1}"}
    finally:
        conn.close()
    assert len(webhook.log.lines) == 5


def test_concurrent_reviews_each_get_their_own_answer(webhook, support):
    clients, per_client = 16, 8
    failures: list[str] = []

    def client(n: int) -> None:
        conn = webhook.connect()
        try:
            for i in range(per_client):
                uid = f"uid-{n}-{i}"
                cpu = f"{n * 100 + i}m"
                pod = support.pod(name=f"pod-{n}-{i}", containers=[support.container("c", requests={"cpu": cpu})])
                reply = webhook.review(support.admission_review(pod, uid=uid), conn=conn)
                patched = support.apply_json_patch(pod, support.decode_patch(reply))
                got = json.loads(patched["metadata"]["annotations"][ANNOTATION])["containers"]["c"]["requests"]
                if reply["response"]["uid"] != uid or got != {"cpu": cpu}:
                    failures.append(f"{uid}: {reply['response']['uid']} {got}")
        except Exception as err:  # noqa: BLE001 - reported below
            failures.append(f"client {n}: {err!r}")
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    review_lines = [line for line in webhook.log.lines if line.startswith("review ")]
    assert len(review_lines) == clients * per_client
    assert len({line.split()[1] for line in review_lines}) == clients * per_client


def test_healthz_and_unknown_paths(webhook):
    conn = webhook.connect()
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"ok\n")
        conn.request("GET", "/nope")
        response = conn.getresponse()
        assert response.status == 404
        assert b"/nope" in response.read()
    finally:
        conn.close()
    status, body = webhook.post(b"{}", path="/validate")
    assert status == 404 and b"/mutate" in body
