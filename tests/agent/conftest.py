"""Fixtures for the node agent's tests: a fake API server under the deployment's
RBAC, a relay-side Config service with a small validating applier, and agents
wired to both."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from cri_resmgr.config.service import ConfigServer
from tests.harness.kubeapi import FakeKubeAPI, rbac_authorizer
from cri_resmgr_agent.kube import new_api_client
from cri_resmgr_agent.node_agent import NodeAgent
from cri_resmgr_agent.options import AgentOptions

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "agent" / "deploy"
NAMESPACE = "kube-system"
BASE = "cri-resmgr-config"
GROUP_LABEL = "cri-resource-manager.intel.com/group"

# The modules and their top-level keys this stand-in for the relay knows.
KNOWN_MODULES = {
    "policy": {"Active", "ReservedResources", "AvailableResources"},
    "logger": {"Debug", "LogSource"},
    "dump": {"Config", "File"},
}


def wait_for(condition: Callable[[], Any], what: str, deadline: float = 20.0) -> Any:
    """Polls until `condition` is truthy. The deadline only guards against a hang."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


class YamlApplier:
    """Stands in for the relay's configuration framework: validates and keeps the configuration."""

    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.sources: list[str] = []
        self.attempts: list[dict[str, str]] = []
        self._lock = threading.Lock()

    def apply(self, data: dict[str, str], source: str) -> str | None:
        with self._lock:
            self.attempts.append(dict(data))
            for module, text in sorted(data.items()):
                if module not in KNOWN_MODULES:
                    return f'unknown configuration module "{module}"'
                try:
                    parsed = yaml.safe_load(text)
                except yaml.YAMLError as exc:
                    return f'module "{module}": invalid YAML: {exc}'
                if parsed is None:
                    continue
                if not isinstance(parsed, dict):
                    return f'module "{module}": expected a mapping, got {type(parsed).__name__}'
                unknown = sorted(set(parsed) - KNOWN_MODULES[module])
                if unknown:
                    return f'module "{module}": unknown key(s) {", ".join(unknown)}'
            self.config = dict(data)
            self.sources.append(source)
            return None

    def current(self) -> dict[str, str]:
        with self._lock:
            return dict(self.config)


class RelayHarness:
    """The relay's real Config server on its own event loop thread; can go down and come back."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.applier = YamlApplier()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="relay-loop")
        self._thread.start()
        self._server: ConfigServer | None = None

    def _run(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> None:
        self._server = ConfigServer(self.applier, self.socket_path)
        self._run(self._server.start())

    def stop(self, leave_stale_socket: bool = False) -> None:
        """Stops serving; `leave_stale_socket` leaves a dead socket file, as a crashed relay does."""
        if self._server is not None:
            self._run(self._server.stop(0))
            self._server = None
        if leave_stale_socket:
            import socket
            with socket.socket(socket.AF_UNIX) as dead:
                dead.bind(self.socket_path)

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def deployment_authorizer():
    rules_by_ns: dict[str, list] = {}
    cluster_rules: list = []
    for doc in yaml.safe_load_all((DEPLOY_DIR / "agent-rbac.yaml").read_text()):
        if doc["kind"] == "Role":
            rules_by_ns.setdefault(doc["metadata"]["namespace"], []).extend(doc["rules"])
        elif doc["kind"] == "ClusterRole":
            cluster_rules.extend(doc["rules"])
    return rbac_authorizer(rules_by_ns, cluster_rules)


@pytest.fixture
def sockdir() -> Iterator[str]:
    # Short: unix socket paths are limited to 107 bytes.
    path = tempfile.mkdtemp(prefix="cra-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubeapi() -> Iterator[FakeKubeAPI]:
    """The fake API server, enforcing the RBAC rules of agent/deploy/agent-rbac.yaml."""
    api = FakeKubeAPI(authorizer=deployment_authorizer()).start()
    yield api
    api.stop()


@pytest.fixture
def kubeconfig(kubeapi: FakeKubeAPI, sockdir: str) -> str:
    return kubeapi.write_kubeconfig(os.path.join(sockdir, "kubeconfig"))


@pytest.fixture
def relay(sockdir: str) -> Iterator[RelayHarness]:
    harness = RelayHarness(os.path.join(sockdir, "config.sock"))
    harness.start()
    yield harness
    harness.close()


@pytest.fixture
def make_agent(kubeconfig: str, sockdir: str) -> Iterator[Callable[..., NodeAgent]]:
    agents: list[NodeAgent] = []

    def make(node_name: str = "node1", start: bool = True, **overrides: Any) -> NodeAgent:
        options = AgentOptions(**{
            "node_name": node_name, "kubeconfig": kubeconfig, "config_namespace": NAMESPACE,
            "configmap_name": BASE, "label_name": GROUP_LABEL,
            "agent_socket": os.path.join(sockdir, f"agent-{len(agents)}.sock"),
            "config_socket": os.path.join(sockdir, "config.sock"),
            "health_address": "127.0.0.1:0",
            "backoff_min_seconds": 0.02, "backoff_max_seconds": 0.2, "request_timeout_seconds": 10,
            **overrides})
        agent = NodeAgent(options, new_api_client(kubeconfig))
        agents.append(agent)
        if start:
            agent.start()
        return agent

    yield make
    for agent in agents:
        agent.stop()


@pytest.fixture
def applier(relay: RelayHarness) -> YamlApplier:
    return relay.applier


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_for
