"""Shared parts of the webhook tests: certificates made by the real
scripts/webhook-certs.sh, a real HTTPS server on loopback, a TLS client that
verifies it by the Service's DNS name, and a small RFC 6902 applier."""
from __future__ import annotations

import base64
import copy
import http.client
import json
import logging
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cri_resmgr_webhook.server import ServerConfig, WebhookServer
from cri_resmgr_webhook.tls import server_context

REPO = Path(__file__).resolve().parents[2]
CERTS_SCRIPT = REPO / "scripts" / "webhook-certs.sh"
SERVICE_HOST = "cri-resmgr-webhook.cri-resmgr.svc"


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    secret_manifest: Path
    webhook_manifest: Path


def make_pki(directory: Path, *args: str) -> Pki:
    subprocess.run(
        ["bash", str(CERTS_SCRIPT), "--dry-run", "--output-dir", str(directory), *args],
        check=True, capture_output=True, text=True,
    )
    return Pki(
        directory, directory / "ca.crt", directory / "ca.key", directory / "tls.crt",
        directory / "tls.key", directory / "secret.yaml",
        directory / "mutatingwebhookconfiguration.yaml",
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("webhook-pki"))


class ServiceConnection(http.client.HTTPSConnection):
    """Connects to a loopback address but verifies the certificate against
    the in-cluster Service name, as the API server does."""

    def __init__(self, port: int, context: ssl.SSLContext, server_hostname: str = SERVICE_HOST) -> None:
        super().__init__("127.0.0.1", port, context=context, timeout=30)
        self.server_hostname = server_hostname

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.server_hostname)


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.lines.append(record.getMessage())


@dataclass
class RunningWebhook:
    server: WebhookServer
    ca_cert: Path
    log: ListHandler
    thread: threading.Thread
    stopped: bool = field(default=False)

    @property
    def port(self) -> int:
        return self.server.port

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def connect(self, server_hostname: str = SERVICE_HOST) -> ServiceConnection:
        return ServiceConnection(self.port, self.client_context(), server_hostname)

    def post(self, body: bytes | str | dict, content_type: str | None = "application/json",
             conn: ServiceConnection | None = None, path: str = "/mutate") -> tuple[int, bytes]:
        """POSTs body and returns (status, response body)."""
        if isinstance(body, dict):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        own = conn is None
        conn = conn or self.connect()
        headers = {"Content-Type": content_type} if content_type is not None else {}
        try:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            if own:
                conn.close()

    def review(self, body: dict, conn: ServiceConnection | None = None) -> dict:
        """POSTs an AdmissionReview that must be answered 200; returns the reply."""
        status, data = self.post(body, conn=conn)
        assert status == 200, data
        return json.loads(data)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.drain(5)
            self.server.server_close()
            self.thread.join()


@pytest.fixture
def start_webhook(pki: Pki, request: pytest.FixtureRequest) -> Iterator[Callable[..., RunningWebhook]]:
    """Starts WebhookServers on loopback, each with its own logger; stops
    them at the end of the test."""
    running: list[RunningWebhook] = []

    def start(config: ServerConfig = ServerConfig()) -> RunningWebhook:
        logger = logging.getLogger(f"test.webhook.{request.node.name}.{len(running)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        handler = ListHandler()
        handler.setLevel(logging.INFO)
        logger.addHandler(handler)
        server = WebhookServer(("127.0.0.1", 0), server_context(str(pki.cert), str(pki.key)), config, logger)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        webhook = RunningWebhook(server, pki.ca_cert, handler, thread)
        running.append(webhook)
        return webhook

    yield start
    for webhook in running:
        webhook.stop()
        for h in list(webhook.server.logger.handlers):
            webhook.server.logger.removeHandler(h)


@pytest.fixture
def webhook(start_webhook: Callable[..., RunningWebhook]) -> RunningWebhook:
    return start_webhook()


def admission_review(obj: Any, uid: str = "0d6b3c4e-7f0a-4d43-9c1e-2f5b2ab1c001",
                     operation: str = "CREATE", kind: dict | None = None,
                     resource: dict | None = None, namespace: str = "default") -> dict:
    """An AdmissionReview v1 request shaped as the API server sends it."""
    kind = kind or {"group": "", "version": "v1", "kind": "Pod"}
    resource = resource or {"group": "", "version": "v1", "resource": "pods"}
    metadata = obj.get("metadata", {}) if isinstance(obj, dict) else {}
    request = {
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": metadata.get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def pod(name: str = "web", containers: list | None = None, init_containers: list | None = None,
        annotations: dict | None = None, **metadata: Any) -> dict:
    """A pod object as the API server puts it in a review (defaults applied)."""
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": "", "labels": {"app": name}}
    meta.update(metadata)
    if annotations is not None:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "containers": containers if containers is not None else [container("main")],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
    }
    if init_containers is not None:
        spec["initContainers"] = init_containers
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": {}}


def container(name: str, requests: dict | None = None, limits: dict | None = None) -> dict:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "registry.example/app:1.0", "resources": resources,
            "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}


def decode_patch(response: dict) -> list[dict]:
    body = response["response"]
    assert body.get("patchType") == "JSONPatch"
    return json.loads(base64.b64decode(body["patch"]))


def apply_json_patch(document: Any, ops: list[dict]) -> Any:
    """Applies RFC 6902 add and replace operations to a copy of document,
    with the RFC's checks: a parent must exist, replace needs the member."""
    result = copy.deepcopy(document)
    for op in ops:
        tokens = _pointer_tokens(op["path"])
        if not tokens:
            if op["op"] not in ("add", "replace"):
                raise ValueError(f"unsupported op {op['op']!r}")
            result = copy.deepcopy(op["value"])
            continue
        parent = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
            elif isinstance(parent, dict):
                parent[last] = copy.deepcopy(op["value"])
            else:
                raise ValueError(f"{op['path']}: parent is not a container")
        elif op["op"] == "replace":
            if isinstance(parent, list):
                parent[int(last)] = copy.deepcopy(op["value"])
            elif isinstance(parent, dict) and last in parent:
                parent[last] = copy.deepcopy(op["value"])
            else:
                raise ValueError(f"{op['path']}: replace of a missing member")
        else:
            raise ValueError(f"unsupported op {op['op']!r}")
    return result


def _pointer_tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} does not start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


@pytest.fixture
def support() -> Any:
    """The builders and the patch applier, for test modules (which cannot
    import this conftest by name)."""

    class Support:
        admission_review = staticmethod(admission_review)
        pod = staticmethod(pod)
        container = staticmethod(container)
        decode_patch = staticmethod(decode_patch)
        apply_json_patch = staticmethod(apply_json_patch)
        make_pki = staticmethod(make_pki)
        ServiceConnection = ServiceConnection
        SERVICE_HOST = SERVICE_HOST
        REPO = REPO
        CERTS_SCRIPT = CERTS_SCRIPT

    return Support
