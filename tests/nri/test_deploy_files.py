"""The plugin's deployment files: the DaemonSet valid against the Kubernetes schema
(offline), and the systemd unit naming the command that is installed."""

from __future__ import annotations

import configparser
from pathlib import Path

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
NODE = REPO / "scripts/node"


def test_daemonset_is_valid_and_runs_the_plugin_command() -> None:
    docs = [d for d in yaml.safe_load_all((NODE / "cri-resmgr-nri-daemonset.yaml").read_text()) if d]
    assert [d["kind"] for d in docs] == ["DaemonSet"]
    kubernetes_validate.validate(docs[0], "1.30.0", strict=True)
    c = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["cri-resmgr-nri"]
    assert "-nri-socket=/var/run/nri/nri.sock" in c["args"]
    assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/var/run/nri", "/var/lib/cri-resmgr"}


def test_daemonset_has_probes_a_scrapable_metrics_port_and_stays_off_relay_nodes() -> None:
    ds = yaml.safe_load((NODE / "cri-resmgr-nri-daemonset.yaml").read_text())
    pod = ds["spec"]["template"]
    c = pod["spec"]["containers"][0]
    # Not the pod's loopback: reachable by a Prometheus through the named port.
    assert "-metrics-address=0.0.0.0:8891" in c["args"]
    assert c["ports"] == [{"name": "metrics", "containerPort": 8891, "protocol": "TCP"}]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8891"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # Only on nodes labelled for the plugin: a relay node would refuse it its state directory.
    assert pod["spec"]["nodeSelector"] == {"cri-resmgr.intel.com/front-end": "nri"}


def test_unit_runs_the_installed_command_and_conflicts_with_the_relay() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((NODE / "cri-resmgr-nri.service").read_text())
    assert unit["Service"]["ExecStart"].startswith("/usr/local/bin/cri-resmgr-nri ")
    assert "cri-resmgr.service" in unit["Unit"]["Conflicts"]
    setup = (REPO / "setup.cfg").read_text()
    assert "cri-resmgr-nri = cri_resmgr.nri.cli:main" in setup
