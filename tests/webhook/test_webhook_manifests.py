"""The deployment files, validated offline against the Kubernetes schemas
that kubernetes-validate ships, and checked against what the webhook does."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cri_resmgr_webhook.cli import CERT_FILE, COMMAND, KEY_FILE, PORT
from cri_resmgr_webhook.handler import HEALTH_PATH, MUTATE_PATH
from cri_resmgr_webhook.server import DEFAULT_PORT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "webhook" / "deploy"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))


def k8s_version() -> str:
    return kubernetes_validate.latest_version()


def validate(doc: dict) -> None:
    """Raises with the schema's own one-line message on an invalid object."""
    try:
        kubernetes_validate.validate(doc, k8s_version(), strict=True)
    except kubernetes_validate.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path)
        raise AssertionError(f"{doc.get('kind')} {doc.get('metadata', {}).get('name')} "
                             f"at /{where}: {err.message}") from None


def load(name: str) -> dict:
    docs = list(yaml.safe_load_all((DEPLOY / name).read_text()))
    assert len(docs) == 1
    return docs[0]


def test_every_kind_has_a_manifest():
    kinds = {load(p.name)["kind"] for p in MANIFESTS}
    assert kinds == {"Namespace", "Deployment", "Service", "MutatingWebhookConfiguration"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid(path):
    for doc in yaml.safe_load_all(path.read_text()):
        validate(doc)


def test_validator_catches_a_bad_field():
    doc = load("deployment.yaml")
    doc["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True  # misspelt
    with pytest.raises(AssertionError, match="readOnlyRootFileSystem"):
        validate(doc)


def deployment_container() -> dict:
    return load("deployment.yaml")["spec"]["template"]["spec"]["containers"][0]


def test_deployment_runs_locked_down():
    pod_spec = load("deployment.yaml")["spec"]["template"]["spec"]
    container = deployment_container()
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}


def test_deployment_probes_are_https_healthz():
    container = deployment_container()
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["scheme"] == "HTTPS" and get["path"] == HEALTH_PATH
        assert port_names.get(get["port"], get["port"]) == DEFAULT_PORT


def test_deployment_args_are_flags_the_program_takes():
    container = deployment_container()
    values = COMMAND.parse(list(container["args"]))
    mount = container["volumeMounts"][0]["mountPath"]
    assert values[CERT_FILE] == f"{mount}/tls.crt"
    assert values[KEY_FILE] == f"{mount}/tls.key"
    assert values[PORT] == DEFAULT_PORT
    assert container["ports"][0]["containerPort"] == DEFAULT_PORT


def test_service_maps_443_to_the_webhook_port():
    service = load("service.yaml")
    container = deployment_container()
    port = service["spec"]["ports"][0]
    assert port["port"] == 443
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named.get(port["targetPort"], port["targetPort"]) == 8443
    pod_labels = load("deployment.yaml")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_webhook_configuration():
    config = load("mutatingwebhookconfiguration.yaml")
    (hook,) = config["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 10
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE"] and rule["resources"] == ["pods"]
    assert rule["apiGroups"] == [""] and rule["apiVersions"] == ["v1"]
    service = load("service.yaml")
    target = hook["clientConfig"]["service"]
    assert (target["name"], target["namespace"]) == (service["metadata"]["name"], service["metadata"]["namespace"])
    assert target["path"] == MUTATE_PATH and target["port"] == 443
    # The webhook's own namespace is left out, so its pods never wait on it.
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and load("namespace.yaml")["metadata"]["name"] in excluded["values"]


def test_everything_lives_in_the_namespace():
    namespace = load("namespace.yaml")["metadata"]["name"]
    for name in ("deployment.yaml", "service.yaml"):
        assert load(name)["metadata"]["namespace"] == namespace


def test_dockerfile_matches_the_deployment():
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["python", "-m", "cri_resmgr_webhook"\]$', dockerfile, re.M)
    assert re.search(r"^COPY webhook/\*\.py /app/cri_resmgr_webhook/$", dockerfile, re.M)
    user = re.search(r"^USER (\d+)", dockerfile, re.M)
    assert user and int(user.group(1)) != 0
    assert "EXPOSE 8443" in dockerfile
    assert re.search(r"^COPY cri_resmgr/__init__\.py cri_resmgr/flags\.py /app/cri_resmgr/$", dockerfile, re.M)


def test_the_image_holds_all_the_webhook_imports(tmp_path, pki):
    """What the Dockerfile's COPY lines put in /app, run without site-packages (the image
    installs nothing): the webhook must start, parse its flags and load its certificate."""
    app = tmp_path / "app"
    for line in (DEPLOY.parent / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            target = app / Path(dest).relative_to("/app")
            target.mkdir(parents=True, exist_ok=True)
            for source in sources:
                for path in REPO.glob(source):
                    shutil.copy2(path, target / path.name)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(app)}
    command = [sys.executable, "-S", "-m", "cri_resmgr_webhook"]
    shown = subprocess.run([*command, "-help"], cwd=app, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "-cert-file, --cert-file" in shown.stdout, shown.stderr
    refused = subprocess.run([*command, "-cert-file", str(pki.cert), "-key-file", str(pki.ca_key)], cwd=app,
                             env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "does not match certificate file" in refused.stderr, refused.stderr
    assert load("deployment.yaml")["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "cri-resmgr-webhook:")
