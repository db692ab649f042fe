"""cri-resmgr-agent as a command: flags, NODE_NAME, -probe, and a real run against the fake cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from cri_resmgr_agent.cli import UsageError, parse_options

NS = "kube-system"


def run_agent(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "cri_resmgr_agent", *args], env=environ, capture_output=True,
                          text=True, timeout=60, **kwargs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_name_is_required():
    result = run_agent("-kubeconfig", "/nonexistent")
    assert result.returncode == 2
    assert "NODE_NAME is not set" in result.stderr


def test_defaults():
    options, _ = parse_options([], {"NODE_NAME": "n1"})
    assert (options.node_name, options.kubeconfig, options.config_namespace, options.configmap_name,
            options.label_name, options.agent_socket, options.config_socket) == (
        "n1", None, "kube-system", "cri-resmgr-config", "cri-resource-manager.intel.com/group",
        "/var/run/cri-resmgr/cri-resmgr-agent.sock", "/var/run/cri-resmgr/cri-resmgr-config.sock")


@pytest.mark.parametrize("argv", [
    ["-kubeconfig", "/k", "-config-ns", "ns", "-configmap-name", "cm", "-label-name", "l",
     "-agent-socket", "/a", "-config-socket", "/c"],
    ["--kubeconfig=/k", "--config-ns=ns", "--configmap-name", "cm", "--label-name=l",
     "--agent-socket=/a", "-config-socket=/c"],
])
def test_single_and_double_dash_flags(argv):
    options, _ = parse_options(argv, {"NODE_NAME": "n1"})
    assert (options.kubeconfig, options.config_namespace, options.configmap_name, options.label_name,
            options.agent_socket, options.config_socket) == ("/k", "ns", "cm", "l", "/a", "/c")


def test_empty_node_name_is_refused():
    with pytest.raises(UsageError, match="NODE_NAME"):
        parse_options([], {"NODE_NAME": "  "})


def test_unknown_flag_is_named():
    result = run_agent("-no-such-flag", env={"NODE_NAME": "n1"})
    assert result.returncode == 2 and "-no-such-flag" in result.stderr


def test_bad_kubeconfig_is_named(sockdir):
    path = os.path.join(sockdir, "broken-kubeconfig")
    with open(path, "w") as f:
        f.write("this: is: not a kubeconfig")
    result = run_agent("-kubeconfig", path, env={"NODE_NAME": "n1"})
    assert result.returncode == 2 and path in result.stderr


def test_probe_follows_readiness(kubeapi, relay, make_agent, wait):
    kubeapi.put_node("node1")
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", {"bogus": ""})
    agent = make_agent()
    address = agent.health_server.address
    wait(lambda: "bogus" in agent.readiness.get()[1], "the rejection")
    rejected = run_agent("-probe", "-metrics-address", address)
    assert rejected.returncode == 1 and 'unknown configuration module "bogus"' in rejected.stderr
    kubeapi.put_configmap(NS, "cri-resmgr-config.default", {"policy": "Active: x\n"})
    wait(lambda: agent.readiness.get()[0], "readiness")
    accepted = run_agent("-probe", "-metrics-address", address)
    assert accepted.returncode == 0 and "cri-resmgr-config.default in force" in accepted.stdout


def test_probe_without_agent_fails(sockdir):
    result = run_agent("-probe", "-metrics-address", f"127.0.0.1:{free_port()}")
    assert result.returncode == 1 and "agent not reachable" in result.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_command_configures_the_relay_and_stops_on_sigterm(kubeapi, kubeconfig, relay, sockdir, wait, fmt):
    """-log-format as the relay's (issue 29): the same fields, times with their zone."""
    kubeapi.put_node("node1", {"cri-resource-manager.intel.com/group": "g"})
    kubeapi.put_configmap(NS, "cri-resmgr-config.group.g", {"policy": "Active: from-group\n"})
    environ = {k: v for k, v in os.environ.items()}
    environ["NODE_NAME"] = "node1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cri_resmgr_agent", "-kubeconfig", kubeconfig,
         "--config-socket", relay.socket_path, "-agent-socket", os.path.join(sockdir, "agent.sock"),
         "-metrics-address", f"127.0.0.1:{free_port()}", "-log-format", fmt],
        env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait(lambda: relay.applier.config == {"policy": "Active: from-group\n"}, "the pushed configuration")
        wait(lambda: os.path.exists(os.path.join(sockdir, "agent.sock")), "the agent socket")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "relay accepted configuration from configmap kube-system/cri-resmgr-config.group.g" in stderr
    assert not os.path.exists(os.path.join(sockdir, "agent.sock"))
    zoned = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d"
    lines = stderr.splitlines()
    if fmt == "text":
        assert all(re.match(zoned + r" (DEBUG|INFO|WARNING|ERROR) \S+: ", line) for line in lines), lines
        return
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(set(r) == {"time", "level", "logger", "message"} and re.fullmatch(zoned, r["time"])
               for r in records), records
    assert records[-1]["message"] == "stopping" and records[-1]["logger"] == "cri_resmgr_agent"


def test_busy_health_address_is_named(kubeconfig, sockdir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        result = run_agent("-kubeconfig", kubeconfig, "-metrics-address", address,
                           "-agent-socket", os.path.join(sockdir, "a.sock"), env={"NODE_NAME": "n1"})
    assert result.returncode == 1 and f"cannot serve readiness on {address}" in result.stderr


def test_the_old_flag_name_still_works_with_one_deprecation_line(sockdir):
    """Issue 29: one set of flag names across relay, plugin, agent and webhook: the agent's
    -health-address is now -metrics-address, as the relay's; the old name keeps working."""
    address = f"127.0.0.1:{free_port()}"
    old = run_agent("-probe", "-health-address", address)
    new = run_agent("-probe", "-metrics-address", address)
    assert old.returncode == new.returncode == 1
    assert old.stderr == "cri-resmgr-agent: warning: -health-address is deprecated: use -metrics-address\n" + \
        new.stderr
    assert "Deprecated: use -metrics-address" in run_agent("-help").stdout


def test_logger_debug_is_the_relays_debug_switch_on_the_agent_and_the_webhook():
    from cri_resmgr_agent.cli import COMMAND as AGENT
    from cri_resmgr_agent.cli import LOGGER_DEBUG as AGENT_DEBUG
    from cri_resmgr_webhook.cli import COMMAND as WEBHOOK
    from cri_resmgr_webhook.cli import LOGGER_DEBUG as WEBHOOK_DEBUG

    assert AGENT.parse(["-logger-debug"])[AGENT_DEBUG] is True
    assert WEBHOOK.parse(["-logger-debug", "-cert-file", "c", "-key-file", "k"])[WEBHOOK_DEBUG] is True
