"""What the webhook refuses (HTTP 400 and friends, plain HTTP, old TLS) and
how it fails open: a fault of its own allows the pod with a warning."""
from __future__ import annotations

import json
import socket
import ssl
import warnings

import pytest

from cri_resmgr_webhook.server import ServerConfig

GOOD_UID = "0d6b3c4e-7f0a-4d43-9c1e-2f5b2ab1c001"


@pytest.mark.parametrize("body,message", [
    (b"{", b"malformed JSON: Expecting property name"),
    (b"", b"malformed JSON: Expecting value"),
    (b"\xff\xfe\x00garbage", b"malformed JSON"),
    (b"[" * 200_000 + b"]" * 200_000, b"malformed JSON: nested too deeply"),
    (b"[]", b"AdmissionReview must be a JSON object, got an array"),
    (b'"review"', b"AdmissionReview must be a JSON object, got a string"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
     b"expected apiVersion 'admission.k8s.io/v1' kind 'AdmissionReview', got apiVersion 'admission.k8s.io/v1beta1'"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
     b"AdmissionReview has no request object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}',
     b"AdmissionReview request has no uid"),
])
def test_malformed_bodies_get_400(webhook, body, message):
    status, reply = webhook.post(body)
    assert status == 400
    assert message in reply
    assert any("rejected" in line for line in webhook.log.lines)


@pytest.mark.parametrize("content_type", ["text/plain", "application/yaml", "application/jsonx", None])
def test_wrong_content_type_gets_400(webhook, support, content_type):
    status, reply = webhook.post(support.admission_review(support.pod()), content_type=content_type)
    assert status == 400
    assert b"unsupported Content-Type" in reply and b"expected application/json" in reply


def test_content_type_parameters_accepted(webhook, support):
    status, _ = webhook.post(support.admission_review(support.pod()), content_type="application/json; charset=utf-8")
    assert status == 200


def test_oversized_body_gets_400_naming_the_limit(start_webhook, support):
    webhook = start_webhook(ServerConfig(max_body_bytes=4096))
    review = support.admission_review(support.pod(annotations={"big": "x" * 8192}))
    body = json.dumps(review).encode()
    status, reply = webhook.post(body)
    assert status == 400
    assert f"request body of {len(body)} bytes exceeds the limit of 4096 bytes".encode() in reply
    # Just under the limit is still served.
    small = support.admission_review(support.pod())
    assert webhook.review(small)["response"]["allowed"] is True


def test_default_limit_is_three_mebibytes(webhook, support):
    conn = webhook.connect()
    try:
        # Headers alone: the reply comes before any of the body is sent.
        conn.putrequest("POST", "/mutate")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(3 * 1024 * 1024 + 1))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 400
        assert b"exceeds the limit of 3145728 bytes" in response.read()
    finally:
        conn.close()


def test_missing_content_length_gets_411(webhook):
    conn = webhook.connect()
    try:
        conn.putrequest("POST", "/mutate")
        conn.putheader("Content-Type", "application/json")
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 411
        assert b"Content-Length is required" in response.read()
    finally:
        conn.close()


def test_plain_http_is_refused(webhook, support):
    body = json.dumps(support.admission_review(support.pod())).encode()
    with socket.create_connection(("127.0.0.1", webhook.port), timeout=30) as sock:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert reply.endswith(b"Client sent an HTTP request to an HTTPS server.\n")
    assert not any(line.startswith("review ") for line in webhook.log.lines)
    assert any("refused plain HTTP request" in line for line in webhook.log.lines)


def test_tls_1_2_accepted_and_1_1_refused(webhook):
    context = webhook.client_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", webhook.port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname="cri-resmgr-webhook.cri-resmgr.svc") as tls:
            assert tls.version() == "TLSv1.2"

    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname = False
    old.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0/1.1: the point here
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # lets this client offer TLS 1.1 at all
    with socket.create_connection(("127.0.0.1", webhook.port), timeout=30) as raw:
        with pytest.raises(ssl.SSLError) as refused:
            old.wrap_socket(raw, server_hostname="cri-resmgr-webhook.cri-resmgr.svc")
    # The server's alert, not this client's own inability to speak TLS 1.1.
    assert "ALERT_PROTOCOL_VERSION" in str(refused.value).upper().replace(" ", "_")


def test_certificate_names_the_service_only(webhook):
    conn = webhook.connect(server_hostname="other.cri-resmgr.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/healthz")
    conn.close()


@pytest.mark.parametrize("spec_change,reason", [
    ({"containers": "oops"}, "spec.containers is a str, not a list"),
    ({"containers": [{"name": "a", "resources": {"requests": ["cpu"]}}]},
     "spec.containers[0].resources.requests is a list, not an object"),
    ({"containers": [{"name": "a"}, {"name": "a"}]}, "spec.containers[1]: duplicate container name 'a'"),
    ({"initContainers": [{"image": "x"}]}, "spec.initContainers[0] has no name"),
    ({"containers": [{"name": "a", "resources": {"limits": {"cpu": True}}}]},
     "spec.containers[0].resources.limits.cpu is a bool, not a quantity"),
])
def test_unusable_pod_is_allowed_with_a_warning(webhook, support, spec_change, reason):
    pod = support.pod()
    pod["spec"].update(spec_change)
    reply = webhook.review(support.admission_review(pod))
    response = reply["response"]
    assert response["uid"] == GOOD_UID
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response
    assert response["warnings"] == [f"cri-resmgr webhook did not set intel.com/resources: {reason}"]
    assert any(line.endswith(f"default/web: not patched: {reason}") for line in webhook.log.lines)


def test_internal_fault_allows_pod_with_warning(start_webhook, support):
    def broken(pod):
        raise KeyError("no such thing")

    webhook = start_webhook(ServerConfig(patch_pod=broken))
    reply = webhook.review(support.admission_review(support.pod()))
    response = reply["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response["warnings"] == ["cri-resmgr webhook did not set intel.com/resources: KeyError: 'no such thing'"]
    assert any("not patched: KeyError: 'no such thing'" in line for line in webhook.log.lines)


def test_unsupported_method(webhook):
    conn = webhook.connect()
    try:
        conn.request("PUT", "/mutate", body=b"{}", headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 501
    finally:
        conn.close()
