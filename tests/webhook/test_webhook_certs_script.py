"""scripts/webhook-certs.sh: a CA and a serving certificate for the Service's
DNS names, the TLS Secret and the filled webhook configuration."""
from __future__ import annotations

import base64
import os
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from cri_resmgr_webhook.server import ServerConfig, WebhookServer
from cri_resmgr_webhook.tls import server_context

kubernetes_validate = pytest.importorskip("kubernetes_validate")


def run_script(support, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(support.CERTS_SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def san_of(cert: Path) -> str:
    out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-ext", "subjectAltName"],
                         check=True, capture_output=True, text=True).stdout
    return out.splitlines()[-1].strip()


def test_dry_run_writes_a_working_pki(pki):
    for path in (pki.ca_cert, pki.ca_key, pki.cert, pki.key, pki.secret_manifest, pki.webhook_manifest):
        assert path.is_file(), path
    assert oct(pki.ca_key.stat().st_mode & 0o777) == "0o600"
    subprocess.run(["openssl", "verify", "-CAfile", str(pki.ca_cert), "-purpose", "sslserver", str(pki.cert)],
                   check=True, capture_output=True)
    assert san_of(pki.cert) == ("DNS:cri-resmgr-webhook, DNS:cri-resmgr-webhook.cri-resmgr, "
                                "DNS:cri-resmgr-webhook.cri-resmgr.svc, "
                                "DNS:cri-resmgr-webhook.cri-resmgr.svc.cluster.local")


def test_secret_manifest(pki):
    secret = yaml.safe_load(pki.secret_manifest.read_text())
    kubernetes_validate.validate(secret, kubernetes_validate.latest_version(), strict=True)
    assert secret["type"] == "kubernetes.io/tls"
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("cri-resmgr-webhook-tls", "cri-resmgr")
    assert base64.b64decode(secret["data"]["tls.crt"]) == pki.cert.read_bytes()
    assert base64.b64decode(secret["data"]["tls.key"]) == pki.key.read_bytes()


def test_filled_configuration_trusts_the_serving_certificate(pki, support):
    config = yaml.safe_load(pki.webhook_manifest.read_text())
    kubernetes_validate.validate(config, kubernetes_validate.latest_version(), strict=True)
    ca_bundle = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
    assert ca_bundle == pki.ca_cert.read_bytes()
    # Only caBundle differs from the template.
    template = yaml.safe_load((support.REPO / "webhook/deploy/mutatingwebhookconfiguration.yaml").read_text())
    template["webhooks"][0]["clientConfig"]["caBundle"] = config["webhooks"][0]["clientConfig"]["caBundle"]
    assert config == template
    # What the API server does: trust caBundle alone, reach the Service name.
    server = WebhookServer(("127.0.0.1", 0), server_context(str(pki.cert), str(pki.key)), ServerConfig())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        context = ssl.create_default_context(cadata=ca_bundle.decode())
        target = config["webhooks"][0]["clientConfig"]["service"]
        conn = support.ServiceConnection(server.port, context, f"{target['name']}.{target['namespace']}.svc")
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.shutdown()
        server.drain(5)
        server.server_close()
        thread.join()


def test_other_namespace_and_service(support, tmp_path):
    pki = support.make_pki(tmp_path, "--namespace", "infra", "--service", "hook", "--secret", "hook-tls")
    assert "DNS:hook.infra.svc" in san_of(pki.cert)
    config = yaml.safe_load(pki.webhook_manifest.read_text())
    assert config["webhooks"][0]["clientConfig"]["service"] == {
        "name": "hook", "namespace": "infra", "path": "/mutate", "port": 443}
    assert config["metadata"]["name"] == "cri-resmgr-webhook"
    secret = yaml.safe_load(pki.secret_manifest.read_text())
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("hook-tls", "infra")


@pytest.mark.parametrize("args,message", [
    (["--namespace", "Not_Valid"], "'Not_Valid' is not a valid Kubernetes name"),
    (["--days", "0"], "--days must be a positive integer, got '0'"),
    (["--service"], "--service needs a value"),
    (["--frobnicate"], "unknown argument '--frobnicate'"),
])
def test_bad_arguments(support, tmp_path, args, message):
    result = run_script(support, "--dry-run", "--output-dir", str(tmp_path), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_real_run_applies_with_kubectl_and_leaves_no_ca_key(support, tmp_path):
    # No cluster here: a kubectl stand-in records what it was asked to apply.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "applied"
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\necho "$@" >>{record}\n[ "$1" = apply ] && cat "$3" >>{record}\n'
                       f'ls "$(dirname "$3")" >>{record}\n')
    kubectl.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    result = run_script(support, env=env)
    assert result.returncode == 0, result.stderr
    applied = record.read_text()
    assert "kind: Secret" in applied and "kind: MutatingWebhookConfiguration" in applied
    assert 'caBundle: ""' not in applied
    # The work directory (with ca.key in it) is gone afterwards.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tmp")] == []


def test_real_run_needs_kubectl(support, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "openssl", "dirname", "basename"):
        (bin_dir / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                                   text=True, check=True).stdout.strip())
    env = {**os.environ, "PATH": str(bin_dir)}
    result = subprocess.run([str(bin_dir / "bash"), str(support.CERTS_SCRIPT)], capture_output=True,
                            text=True, timeout=60, env=env)
    assert result.returncode == 2
    assert "kubectl not found (or use --dry-run)" in result.stderr
