"""Command line of cri-resmgr-agent.

Flags are written Go style like the relay's: single or double dash, with the
value after a space or '='.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence

from cri_resmgr.errors import CriResmgrError
from cri_resmgr_agent.options import AgentOptions
from cri_resmgr_agent.readiness import probe

log = logging.getLogger("cri_resmgr_agent")


class UsageError(CriResmgrError):
    pass


def _parser() -> argparse.ArgumentParser:
    d = AgentOptions(node_name="")
    p = argparse.ArgumentParser(prog="cri-resmgr-agent", allow_abbrev=False,
                                description="Configures cri-resmgr on this node from the cluster's ConfigMaps "
                                            "and acts on the cluster for it. NODE_NAME must name this node.")

    def flag(name: str, **kwargs) -> None:
        p.add_argument(f"-{name}", f"--{name}", **kwargs)

    flag("kubeconfig", default=None, metavar="PATH", help="kubeconfig file (default: in-cluster configuration)")
    flag("config-ns", default=d.config_namespace, metavar="NS", help="namespace of the configuration ConfigMaps")
    flag("configmap-name", default=d.configmap_name, metavar="NAME",
         help="ConfigMap base name: NAME.node.<node>, NAME.group.<group>, NAME.default")
    flag("label-name", default=d.label_name, metavar="LABEL", help="node label whose value is the node's group")
    flag("agent-socket", default=d.agent_socket, metavar="PATH", help="where to serve the Agent service")
    flag("config-socket", default=d.config_socket, metavar="PATH", help="the relay's Config service socket")
    flag("health-address", default=d.health_address, metavar="HOST:PORT",
         help="where to serve /readyz and /healthz ('' disables)")
    flag("probe", action="store_true",
         help="ask the agent at -health-address whether it is ready; exit 0 if so, 1 if not")
    flag("log-level", default="info", choices=["debug", "info", "warning", "error"], help="logging threshold")
    return p


def parse_options(argv: Sequence[str], environ: dict[str, str]) -> tuple[AgentOptions, argparse.Namespace]:
    args = _parser().parse_args(list(argv))
    node_name = environ.get("NODE_NAME", "").strip()
    if not node_name and not args.probe:
        raise UsageError("NODE_NAME is not set: set it to this node's name, e.g. from the pod's "
                         "spec.nodeName with the downward API (env NODE_NAME)")
    options = AgentOptions(node_name=node_name, kubeconfig=args.kubeconfig, config_namespace=args.config_ns,
                           configmap_name=args.configmap_name, label_name=args.label_name,
                           agent_socket=args.agent_socket, config_socket=args.config_socket,
                           health_address=args.health_address)
    return options, args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options, args = parse_options(sys.argv[1:] if argv is None else argv, dict(os.environ))
    except UsageError as exc:
        print(f"cri-resmgr-agent: {exc}", file=sys.stderr)
        return 2
    if args.probe:
        ready, reason = probe(options.health_address)
        print(("ready: " if ready else "not ready: ") + reason, file=sys.stdout if ready else sys.stderr)
        return 0 if ready else 1
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # urllib3 warns about every connection retry; during an API server outage the
    # reflectors already say so once.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)

    from cri_resmgr_agent.kube import new_api_client
    from cri_resmgr_agent.node_agent import NodeAgent

    try:
        api_client = new_api_client(options.kubeconfig)
    except Exception as exc:
        where = options.kubeconfig or "the in-cluster service account"
        print(f"cri-resmgr-agent: cannot load Kubernetes client configuration from {where}: {exc}",
              file=sys.stderr)
        return 2
    try:
        agent = NodeAgent(options, api_client)
    except OSError as exc:
        print(f"cri-resmgr-agent: cannot serve readiness on {options.health_address}: {exc}", file=sys.stderr)
        return 1
    try:
        agent.start()
    except OSError as exc:
        print(f"cri-resmgr-agent: {exc}", file=sys.stderr)
        agent.stop()
        return 1
    stop = lambda signum, frame: agent.request_stop()  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.wait()
    log.info("stopping")
    agent.stop()
    return 0
