"""Prometheus metrics, read from the controller at scrape time.

Nothing is counted on the relay's hot path for this: the collector reads the
engine's own counters when Prometheus asks. Uses a registry of its own, not
prometheus_client's global one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


class EngineCollector(Collector):
    def __init__(self, controller) -> None:
        self._c = controller

    def collect(self) -> Iterator:
        c = self._c
        active = GaugeMetricFamily("cri_resmgr_policy_active", "The active policy (1)", labels=["policy"])
        active.add_metric([c.policy_name], 1)
        yield active
        rm = c.resmgr
        stats = rm.stats if rm is not None else None
        yield CounterMetricFamily("cri_resmgr_policy_decisions", "Placement decisions made",
                                  value=stats.decisions if stats else 0)
        yield CounterMetricFamily("cri_resmgr_policy_errors",
                                  "Requests on which the policy failed (forwarded unchanged when fail-open)",
                                  value=stats.policy_errors if stats else 0)
        yield CounterMetricFamily("cri_resmgr_released_on_exit", "Containers released when seen exited",
                                  value=stats.released_on_exit if stats else 0)
        enf = c.enforcer
        yield CounterMetricFamily("cri_resmgr_updates_sent", "UpdateContainerResources sent on the relay's own",
                                  value=enf.sent if enf else 0)
        yield CounterMetricFamily("cri_resmgr_updates_failed", "Unsolicited updates given up after retries",
                                  value=enf.failed if enf else 0)
        containers = GaugeMetricFamily("cri_resmgr_containers", "Containers tracked by the cache")
        containers.add_metric([], len(rm.cache.containers) if rm is not None else 0)
        yield containers
        if c.dumper is not None:
            yield CounterMetricFamily("cri_resmgr_dump_dropped", "Dump messages dropped (queue full)",
                                      value=c.dumper.dropped)


def serve(controller, address: str) -> CollectorRegistry:
    """Serves /metrics on host:port (a thread of prometheus_client's)."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(controller))
    start_http_server(int(port), addr=host or "127.0.0.1", registry=registry)
    log.info("metrics on http://%s:%s/metrics", host or "127.0.0.1", port)
    return registry
