"""Command line of cri-resmgr-agent: Go-style flags like the relay's (cri_resmgr.flags)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence

from cri_resmgr import __version__, flags
from cri_resmgr.errors import CriResmgrError
from cri_resmgr_agent.options import AgentOptions
from cri_resmgr_agent.readiness import probe

log = logging.getLogger("cri_resmgr_agent")
PROG = "cri-resmgr-agent"
_DEFAULTS = AgentOptions(node_name="")


class UsageError(CriResmgrError, flags.UsageError):
    pass


KUBECONFIG = flags.text("kubeconfig", "PATH", "kubeconfig file (default: in-cluster configuration)", None)
CONFIG_NS = flags.text("config-ns", "NS", "namespace of the configuration ConfigMaps",
                       _DEFAULTS.config_namespace)
CONFIGMAP_NAME = flags.text("configmap-name", "NAME",
                            "ConfigMap base name: NAME.node.<node>, NAME.group.<group>, NAME.default",
                            _DEFAULTS.configmap_name)
LABEL_NAME = flags.text("label-name", "LABEL", "node label whose value is the node's group", _DEFAULTS.label_name)
AGENT_SOCKET = flags.text("agent-socket", "PATH", "where to serve the Agent service", _DEFAULTS.agent_socket)
CONFIG_SOCKET = flags.text("config-socket", "PATH", "the relay's Config service socket", _DEFAULTS.config_socket)
# The relay's names for the same things (-metrics-address, -logger-debug); -health-address still works.
HEALTH_ADDRESS = flags.text("metrics-address", "HOST:PORT", "where to serve /readyz and /healthz ('' disables); "
                            "was -health-address", _DEFAULTS.health_address)
PROBE = flags.switch("probe", "ask the agent at -metrics-address whether it is ready; exit 0 if so, 1 if not")
LOG_LEVEL = flags.choice("log-level", "logging threshold", ("debug", "info", "warning", "error"), "info")
LOGGER_DEBUG = flags.switch("logger-debug", "debug logging, as -log-level debug (the relay's flag)")
LOG_FORMAT = flags.log_format()

COMMAND = flags.Command(
    PROG,
    "Configures cri-resmgr on this node from the cluster's ConfigMaps and acts on the cluster for it. "
    "NODE_NAME must name this node.",
    (KUBECONFIG, CONFIG_NS, CONFIGMAP_NAME, LABEL_NAME, AGENT_SOCKET, CONFIG_SOCKET, HEALTH_ADDRESS, PROBE,
     LOG_LEVEL, LOGGER_DEBUG, LOG_FORMAT),
    version=__version__,
    renamed={"health-address": "metrics-address"},
)


def parse_options(argv: Sequence[str], environ: dict[str, str]) -> tuple[AgentOptions, flags.Values]:
    """Raises flags.UsageError for bad flags, UsageError without NODE_NAME (unless probing)."""
    values = COMMAND.parse(argv)
    return _options(values, environ), values


def main(argv: Sequence[str] | None = None) -> int:
    return COMMAND.run(sys.argv[1:] if argv is None else argv, _run)


def _options(values: flags.Values, environ: dict[str, str]) -> AgentOptions:
    node_name = environ.get("NODE_NAME", "").strip()
    if not node_name and not values[PROBE]:
        raise UsageError("NODE_NAME is not set: set it to this node's name, e.g. from the pod's "
                         "spec.nodeName with the downward API (env NODE_NAME)")
    return AgentOptions(node_name=node_name, kubeconfig=values[KUBECONFIG], config_namespace=values[CONFIG_NS],
                        configmap_name=values[CONFIGMAP_NAME], label_name=values[LABEL_NAME],
                        agent_socket=values[AGENT_SOCKET], config_socket=values[CONFIG_SOCKET],
                        health_address=values[HEALTH_ADDRESS])


def _run(values: flags.Values) -> int:
    options = _options(values, dict(os.environ))
    if values[PROBE]:
        ready, reason = probe(options.health_address)
        print(flags.probe_line(ready, reason), file=sys.stdout if ready else sys.stderr)
        return 0 if ready else 1
    logging.basicConfig(level="DEBUG" if values[LOGGER_DEBUG] else values[LOG_LEVEL].upper())
    for handler in logging.getLogger().handlers:
        handler.setFormatter(flags.log_formatter(values[LOG_FORMAT]))
    # urllib3 warns about every connection retry; during an API server outage the
    # reflectors already say so once.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    _serve(options)
    return 0


def _serve(options: AgentOptions) -> None:
    """Runs the agent until SIGTERM or SIGINT; raises CommandError if it cannot start."""
    from cri_resmgr_agent.kube import new_api_client
    from cri_resmgr_agent.node_agent import NodeAgent

    try:
        api_client = new_api_client(options.kubeconfig)
    except Exception as exc:  # whatever the kubernetes client raises for a bad configuration
        where = options.kubeconfig or "the in-cluster service account"
        raise UsageError(f"cannot load Kubernetes client configuration from {where}: {exc}") from None
    try:
        agent = NodeAgent(options, api_client)
    except OSError as exc:
        raise flags.CommandError(f"cannot serve readiness on {options.health_address}: {exc}") from None
    try:
        agent.start()
    except (OSError, CriResmgrError) as exc:  # a bind failure, a socket another agent serves on
        agent.stop()
        raise flags.CommandError(str(exc)) from None
    stop = lambda signum, frame: agent.request_stop()  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.wait()
    log.info("stopping")
    agent.stop()
