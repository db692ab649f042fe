"""Fixtures for the node agent's tests: a fake API server under the deployment's
RBAC, a relay-side Config service with a small validating applier
(tests.harness.config_relay), and agents wired to both."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cri_resmgr_agent.kube import new_api_client
from cri_resmgr_agent.node_agent import NodeAgent
from cri_resmgr_agent.options import AgentOptions
from tests.harness.config_relay import RelayHarness, YamlApplier
from tests.harness.kubeapi import FakeKubeAPI, rbac_authorizer

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "agent" / "deploy"
NAMESPACE = "kube-system"
BASE = "cri-resmgr-config"
GROUP_LABEL = "cri-resource-manager.intel.com/group"


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
