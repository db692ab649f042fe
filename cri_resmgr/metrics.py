"""Prometheus metrics, read from the controller at scrape time.

Nothing is counted on the relay's hot path for this: the collector reads the
engine's own counters when Prometheus asks. Uses a registry of its own, not
prometheus_client's global one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from cri_resmgr.engine.controller import EngineStats


class StatsSource(Protocol):
    """The engine as metrics see it (`engine.controller.Controller` is one)."""

    def stats(self) -> EngineStats: ...


class EngineCollector(Collector):
    def __init__(self, engine: StatsSource) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        s = self._engine.stats()
        active = GaugeMetricFamily("cri_resmgr_policy_active", "The active policy (1)", labels=["policy"])
        active.add_metric([s.policy], 1)
        yield active
        yield CounterMetricFamily("cri_resmgr_policy_decisions", "Placement decisions made", value=s.decisions)
        yield CounterMetricFamily("cri_resmgr_policy_errors",
                                  "Requests on which the policy failed (forwarded unchanged when fail-open)",
                                  value=s.policy_errors)
        yield CounterMetricFamily("cri_resmgr_released_on_exit", "Containers released when seen exited",
                                  value=s.released_on_exit)
        yield CounterMetricFamily("cri_resmgr_exclusive_cpus_denied",
                                  "Containers that asked for exclusive CPUs and were placed without them",
                                  value=s.exclusive_denied)
        yield CounterMetricFamily("cri_resmgr_updates_sent", "UpdateContainerResources sent on the relay's own",
                                  value=s.updates_sent)
        yield CounterMetricFamily("cri_resmgr_updates_failed", "Unsolicited updates given up after retries",
                                  value=s.updates_failed)
        containers = GaugeMetricFamily("cri_resmgr_containers", "Containers tracked by the cache")
        containers.add_metric([], s.containers)
        yield containers
        if s.dump_dropped is not None:
            yield CounterMetricFamily("cri_resmgr_dump_dropped", "Dump messages dropped (queue full)",
                                      value=s.dump_dropped)


def registry(engine: StatsSource) -> CollectorRegistry:
    """A registry of our own holding the engine's collector (health.py serves it)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engine))
    return reg
