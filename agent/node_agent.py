"""Wires the agent together: two reflectors feed the cluster view, whose
selections the pusher delivers to the relay; the reporter and readiness make the
relay's answers visible; the Agent service serves the relay's requests.
"""

from __future__ import annotations

import logging
import threading

from kubernetes import client

from cri_resmgr_agent.agent_service import AgentServer
from cri_resmgr_agent.backoff import Backoff
from cri_resmgr_agent.cluster_view import ClusterView
from cri_resmgr_agent.node_ops import NodeOps
from cri_resmgr_agent.options import AgentOptions
from cri_resmgr_agent.pusher import ConfigPusher, PushOutcome
from cri_resmgr_agent.readiness import HealthServer, Readiness
from cri_resmgr_agent.reflector import Reflector
from cri_resmgr_agent.relay_client import RelayConfigClient
from cri_resmgr_agent.reporter import ClusterReporter
from cri_resmgr_agent.selection import ConfigMapNames, Selection
from cri_resmgr_agent.sources import configmap_source, node_source

log = logging.getLogger(__name__)


class NodeAgent:
    def __init__(self, options: AgentOptions, api_client: client.ApiClient) -> None:
        self.options = options
        o = options
        self._stop = threading.Event()
        self._started = False
        core = client.CoreV1Api(api_client)

        def backoff() -> Backoff:
            return Backoff(o.backoff_min_seconds, o.backoff_max_seconds)

        self.readiness = Readiness()
        self.relay = RelayConfigClient(o.config_socket, timeout=o.request_timeout_seconds)
        self.reporter = ClusterReporter(core, o.node_name, backoff(), self._stop, o.request_timeout_seconds)
        self.pusher = ConfigPusher(self.relay, o.node_name, o.config_namespace, backoff(), self._stop,
                                   on_outcome=self._outcome, on_undelivered=self._undelivered)
        self.view = ClusterView(ConfigMapNames(o.configmap_name), o.node_name, o.label_name, self._selected)
        cm_list, cm_watch = configmap_source(core, o.config_namespace, o.watch_timeout_seconds,
                                             o.request_timeout_seconds)
        node_list, node_watch = node_source(core, o.node_name, o.watch_timeout_seconds, o.request_timeout_seconds)
        self.configmap_reflector = Reflector(f"configmaps in {o.config_namespace}", cm_list, cm_watch,
                                             self.view.configmaps_consumer, backoff(), self._stop)
        self.node_reflector = Reflector(f"node {o.node_name}", node_list, node_watch,
                                        self.view.node_consumer, backoff(), self._stop)
        self.agent_server = AgentServer(NodeOps(core, o.node_name, o.request_timeout_seconds), o.agent_socket)
        self.health_server: HealthServer | None = (
            HealthServer(self.readiness, o.health_address) if o.health_address else None)
        self._threads = [
            threading.Thread(target=target, name=name, daemon=True)
            for name, target in (("configmap-watch", self.configmap_reflector.run),
                                 ("node-watch", self.node_reflector.run),
                                 ("pusher", self.pusher.run),
                                 ("reporter", self.reporter.run))]

    def start(self) -> None:
        self._started = True
        log.info("agent for node %s: configuration from configmap %s.{node.%s,group.<%s>,default} in %s",
                 self.options.node_name, self.options.configmap_name, self.options.node_name,
                 self.options.label_name, self.options.config_namespace)
        self.agent_server.start()
        if self.health_server is not None:
            self.health_server.start()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        if not self._started:
            return
        self._started = False
        for thread in self._threads:
            # Repeated: a watch being opened right now misses a single interrupt.
            while thread.is_alive():
                self.configmap_reflector.interrupt()
                self.node_reflector.interrupt()
                self.pusher.wake()
                self.reporter.wake()
                thread.join(0.1)
        self.agent_server.stop()
        if self.health_server is not None:
            self.health_server.stop()
        self.relay.close()

    def request_stop(self) -> None:
        """Makes wait() return; safe from a signal handler."""
        self._stop.set()

    def wait(self) -> None:
        self._stop.wait()

    def _selected(self, selection: Selection) -> None:
        self.pusher.offer(selection)

    def _undelivered(self, selection: Selection, why: str) -> None:
        self.readiness.set(False, f"configuration from {selection.source} not delivered to cri-resmgr: {why}")

    def _outcome(self, outcome: PushOutcome) -> None:
        if outcome.error:
            self.readiness.set(False, f"{outcome.source} rejected by cri-resmgr: {outcome.error}")
        else:
            self.readiness.set(True, f"{outcome.source} in force")
        self.reporter.report(outcome)
