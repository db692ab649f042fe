"""The pure parts: the annotation value, the JSONPatch, the review answer
and the TLS context, without a server."""
from __future__ import annotations

import base64
import json
import ssl

import pytest

from cri_resmgr_webhook.annotation import PodShapeError, pod_resources, resources_annotation
from cri_resmgr_webhook.patch import escape_pointer_token, set_annotation_patch
from cri_resmgr_webhook.review import MalformedReview, review
from cri_resmgr_webhook.tls import server_context


@pytest.mark.parametrize("token,escaped", [
    ("intel.com/resources", "intel.com~1resources"),
    ("a~b/c", "a~0b~1c"),
    ("~1", "~01"),
    ("plain", "plain"),
])
def test_pointer_escaping(token, escaped, support):
    assert escape_pointer_token(token) == escaped
    # Round trip through the test applier's unescaping.
    doc = support.apply_json_patch({}, [{"op": "add", "path": "/" + escaped, "value": 1}])
    assert doc == {token: 1}


def test_annotation_is_compact_and_stable():
    pod = {"spec": {"containers": [{"name": "b", "resources": {"requests": {"memory": "1Gi", "cpu": "1"}}},
                                   {"name": "a"}]}}
    value = resources_annotation(pod)
    assert value == ('{"containers":{"a":{"limits":{},"requests":{}},'
                     '"b":{"limits":{},"requests":{"cpu":"1","memory":"1Gi"}}},"initContainers":{}}')


def test_bare_json_numbers_become_their_json_spelling():
    pod = {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": 2, "memory": 1.5e9}}}]}}
    assert pod_resources(pod)["containers"]["a"]["requests"] == {"cpu": "2", "memory": "1500000000.0"}


@pytest.mark.parametrize("pod,message", [
    ([], "pod object is a list, not an object"),
    ({}, "pod has no spec object"),
    ({"spec": {"containers": [1]}}, "spec.containers[0] is a int, not an object"),
    ({"spec": {"containers": [{"name": "a", "resources": "big"}]}}, "spec.containers[0].resources is a str"),
])
def test_shape_errors_name_the_field(pod, message):
    with pytest.raises(PodShapeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        pod_resources(pod)


def test_patch_for_object_without_metadata(support):
    ops = set_annotation_patch({"spec": {}}, "k/x", "v")
    assert support.apply_json_patch({"spec": {}}, ops) == {"spec": {}, "metadata": {"annotations": {"k/x": "v"}}}


def test_review_answers_only_what_was_asked():
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "namespace": "ns",
                        "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}}}
    result = review(body)
    assert result.patched and result.log_line() == "review u ns/p: patched"
    assert set(result.response["response"]) == {"uid", "allowed", "patchType", "patch"}
    ops = json.loads(base64.b64decode(result.response["response"]["patch"]))
    assert ops[0]["path"] == "/metadata/annotations"


def test_review_without_object_allows_with_warning():
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE"}}
    result = review(body)
    assert not result.patched
    assert result.response["response"]["warnings"] == [
        "cri-resmgr webhook did not set intel.com/resources: request.object is not a pod object"]


def test_long_warning_is_cut_to_what_the_api_server_keeps():
    def verbose(pod):
        raise ValueError("x" * 1000)

    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "object": {}}}
    warnings = review(body, verbose).response["response"]["warnings"]
    assert len(warnings) == 1 and len(warnings[0]) == 256


def test_malformed_review_raises():
    with pytest.raises(MalformedReview, match="got null"):
        review(None)


def test_server_context_requires_tls_1_2(pki):
    context = server_context(str(pki.cert), str(pki.key))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
