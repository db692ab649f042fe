"""The deployment files: valid against the Kubernetes schemas (offline), least privilege, consistent."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from cri_resmgr_agent.options import AgentOptions

DEPLOY = Path(__file__).resolve().parents[2] / "agent" / "deploy"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
K8S_VERSION = "1.30.0"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def by_kind(kind: str) -> list[dict]:
    return [d for path in MANIFESTS for d in docs(path.name) if d["kind"] == kind]


def test_there_are_manifests():
    assert {p.name for p in MANIFESTS} >= {"agent-daemonset.yaml", "agent-rbac.yaml", "sample-configmaps.yaml"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_against_the_kubernetes_schema(path):
    for doc in docs(path.name):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_catches_a_bad_manifest():
    daemonset = by_kind("DaemonSet")[0]
    daemonset["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolicy"):
        kubernetes_validate.validate(daemonset, K8S_VERSION, strict=True)
    unknown_field = by_kind("ServiceAccount")[0]
    unknown_field["spec"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown_field, K8S_VERSION, strict=True)


def test_rbac_is_least_privilege():
    options = AgentOptions(node_name="")
    roles = by_kind("Role")
    namespaced = {r["metadata"]["namespace"]: {(tuple(rule["resources"]), tuple(sorted(rule["verbs"])))
                                               for rule in r["rules"]} for r in roles}
    # The ConfigMaps where the agent reads them; Events where the API server takes Events about a Node.
    assert namespaced == {options.config_namespace: {(("configmaps",), ("get", "list", "watch"))},
                          "default": {(("events",), ("create",))}}
    bound = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in by_kind("RoleBinding")}
    assert bound == {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in roles}
    cluster = {(tuple(rule["resources"]), tuple(sorted(rule["verbs"])))
               for role in by_kind("ClusterRole") for rule in role["rules"]}
    assert cluster == {(("nodes",), ("get", "patch", "watch")), (("nodes/status",), ("patch",))}
    for rule in [r for role in roles + by_kind("ClusterRole") for r in role["rules"]]:
        assert rule["apiGroups"] == [""] and "*" not in rule["verbs"] and "*" not in rule["resources"]
    # Every role is bound to the agent's service account, and to nothing else.
    account = by_kind("ServiceAccount")[0]["metadata"]
    for binding in by_kind("RoleBinding") + by_kind("ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                        "namespace": account["namespace"]}]


def test_daemonset_runs_the_agent_as_configured():
    daemonset = by_kind("DaemonSet")[0]
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    options = AgentOptions(node_name="")
    assert daemonset["metadata"]["namespace"] == "kube-system"
    assert pod["serviceAccountName"] == by_kind("ServiceAccount")[0]["metadata"]["name"]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    assert container["readinessProbe"]["exec"]["command"] == ["cri-resmgr-agent", "-probe"]
    assert f"-config-ns={options.config_namespace}" in container["args"]
    mount = container["volumeMounts"][0]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    socket_dir = str(Path(options.agent_socket).parent)
    assert mount["mountPath"] == socket_dir == str(Path(options.config_socket).parent)
    assert volume["hostPath"] == {"path": socket_dir, "type": "DirectoryOrCreate"}


def test_sample_configmaps_follow_the_naming_scheme_and_hold_yaml_modules():
    maps = by_kind("ConfigMap")
    names = sorted(m["metadata"]["name"] for m in maps)
    assert names == ["cri-resmgr-config.default", "cri-resmgr-config.group.dedicated",
                     "cri-resmgr-config.node.node1"]
    for cm in maps:
        assert cm["metadata"]["namespace"] == "kube-system"
        for module, text in cm["data"].items():
            assert isinstance(yaml.safe_load(text), dict), f"{cm['metadata']['name']}: {module}"


def test_sample_configmaps_configure_agents(kubeapi, relay, make_agent, wait):
    for cm in by_kind("ConfigMap"):
        kubeapi.put_configmap(cm["metadata"]["namespace"], cm["metadata"]["name"], cm["data"])
    kubeapi.put_node("node1")
    make_agent("node1")
    node_map = next(cm for cm in by_kind("ConfigMap") if cm["metadata"]["name"].endswith("node.node1"))
    wait(lambda: relay.applier.config == node_map["data"], "node1's own sample map accepted")


def test_sample_configmaps_are_valid_relay_configurations():
    from cri_resmgr.config.schema import parse_modules
    from cri_resmgr.policy.registry import default_registry

    for cm in by_kind("ConfigMap"):
        config = parse_modules(cm["data"], cm["metadata"]["name"], default_registry().names())
        assert config.policy.active in default_registry().names()
