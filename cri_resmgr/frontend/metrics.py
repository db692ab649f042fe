"""Prometheus metrics, read from the engine and the transport at scrape time.

Nothing calls prometheus_client on the relay's hot path: the transport and the
engine count in plain integers (`cri_resmgr.buckets`) and hand out snapshots,
which this collector turns into metric families when Prometheus asks. Uses a
registry of its own, not prometheus_client's global one. The families and their
labels are listed in docs/metrics.md.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from cri_resmgr import __version__
from cri_resmgr.buckets import BOUNDS_NS, HistogramSnapshot
from cri_resmgr.engine.classes import ClassStats
from cri_resmgr.engine.controller import EngineStats
from cri_resmgr.engine.cpuclasses import CpuClassStats
from cri_resmgr.engine.nodectl import NodeStats
from cri_resmgr.engine.usage import NodeUsage
from cri_resmgr.transport.contract import TransportStats

# Series of cri_resmgr_container_exclusive_cpus: the containers with the most
# exclusive CPUs; the rest are counted in cri_resmgr_container_exclusive_cpus_unlisted.
MAX_CONTAINER_SERIES = 100

_LE = [f"{b / 1e9:g}" for b in BOUNDS_NS] + ["+Inf"]


class StatsSource(Protocol):
    """The engine as metrics see it (`engine.controller.Controller` is one)."""

    def stats(self) -> EngineStats: ...
    def usage(self) -> NodeUsage | None: ...


class TransportSource(Protocol):
    def stats(self) -> TransportStats: ...


def _buckets(h: HistogramSnapshot) -> list[tuple[str, float]]:
    out, total = [], 0
    for le, n in zip(_LE, h.counts, strict=True):
        total += n
        out.append((le, float(total)))
    return out


def _class_families(c: ClassStats) -> Iterator[Metric]:
    """Block I/O and RDT classes (docs/classes.md)."""
    given = CounterMetricFamily("cri_resmgr_class_assignments", "Containers given a block I/O or RDT class "
                                "(counted when a container gets it)", labels=["kind", "class"])
    for (kind, name), n in sorted(c.assignments.items()):
        given.add_metric([kind, name], n)
    yield given
    failed = CounterMetricFamily("cri_resmgr_class_failures", "Block I/O rules or RDT groups and tasks that could "
                                 "not be written", labels=["kind"])
    for kind, n in sorted(c.failures.items()):
        failed.add_metric([kind], n)
    yield failed
    yield CounterMetricFamily("cri_resmgr_class_unknown", "Annotations naming a class the configuration does not "
                              "have (the container runs without one)", value=c.unknown)
    refused = GaugeMetricFamily("cri_resmgr_class_refused_lines", "Containers whose block I/O class has a line the "
                                "kernel refuses now, by class, file and reason (the line is in cri-resmgr status)",
                                labels=["kind", "class", "file", "reason"])
    for r in c.refused:
        refused.add_metric(["blockio", r.cls, r.file, r.reason.split(" ")[0]], r.containers)
    yield refused


def _node_families(n: NodeStats) -> Iterator[Metric]:
    """Scheduling classes and IRQ affinity (docs/classes.md)."""
    given = CounterMetricFamily("cri_resmgr_sched_class_assignments", "Containers given a scheduling class "
                                "(counted when a container gets it)", labels=["class"])
    for name, count in sorted(n.sched_assignments.items()):
        given.add_metric([name], count)
    yield given
    yield CounterMetricFamily("cri_resmgr_sched_class_failures", "Containers with threads the kernel refused "
                              "their scheduling class (counted per refusal)", value=n.sched_failures)
    yield CounterMetricFamily("cri_resmgr_sched_rt_budget_refused", "RT budgets (cgroup v1 cpu.rt_runtime_us) the "
                              "kernel refused a fifo or rr container's cgroup chain", value=n.rt_budget_refused)
    yield CounterMetricFamily("cri_resmgr_irq_affinity_writes", "IRQ affinities written (only changed ones)",
                              value=n.irq_writes)
    yield CounterMetricFamily("cri_resmgr_irq_affinity_failures", "IRQ affinity writes the kernel refused",
                              value=n.irq_failures)


def _cpu_class_families(c: CpuClassStats) -> Iterator[Metric]:
    """CPU classes (docs/classes.md): each class's CPUs now, the files written, refused."""
    cpus = GaugeMetricFamily("cri_resmgr_cpu_class_cpus", "CPUs that have a CPU class now", labels=["class"])
    for name, members in sorted(c.cpus.items()):
        cpus.add_metric([name], len(members))
    yield cpus
    yield CounterMetricFamily("cri_resmgr_cpu_class_writes", "cpufreq, cpuidle and uncore files written for "
                              "CPU classes", value=c.writes)
    yield CounterMetricFamily("cri_resmgr_cpu_class_failures", "Writes of CPU classes the kernel refused",
                              value=c.failures)
    yield _gauge("cri_resmgr_cpu_class_failing_files", "Files whose last CPU class write was refused (tried "
                 "again at the next decision)", len(c.failed))
    yield CounterMetricFamily("cri_resmgr_cpu_class_unknown", "Annotations naming a CPU class the configuration "
                              "does not have (the container's CPUs run without one)", value=c.unknown)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class EngineCollector(Collector):
    def __init__(self, engine: StatsSource, transport: TransportSource | None = None) -> None:
        self._engine = engine
        self._transport = transport

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("cri_resmgr_build_info", "The running build (1)", labels=["version", "python"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
        s = self._engine.stats()
        yield from self._engine_families(s)
        if self._transport is not None:
            yield from self._transport_families(self._transport.stats())
        usage = self._engine.usage()
        if usage is not None:
            yield from self._usage_families(usage)

    def _engine_families(self, s: EngineStats) -> Iterator[Metric]:
        active = GaugeMetricFamily("cri_resmgr_policy_active", "The active policy (1)", labels=["policy"])
        active.add_metric([s.policy], 1)
        yield active
        yield CounterMetricFamily("cri_resmgr_policy_decisions", "Placement decisions made", value=s.decisions)
        yield CounterMetricFamily("cri_resmgr_policy_errors",
                                  "Requests on which the policy failed (forwarded unchanged when fail-open)",
                                  value=s.policy_errors)
        if s.decision_latency is not None:
            h = HistogramMetricFamily("cri_resmgr_policy_decision_duration_seconds",
                                      "Time the policy took to place a new container (since the last policy switch)")
            h.add_metric([], _buckets(s.decision_latency), s.decision_latency.sum_ns / 1e9)
            yield h
        yield CounterMetricFamily("cri_resmgr_resizes", "In-place resizes the policy re-decided",
                                  value=s.resizes)
        yield CounterMetricFamily("cri_resmgr_resizes_refused",
                                  "In-place resizes that could not be met (kubelet's update failed): each is logged",
                                  value=s.resizes_refused)
        yield CounterMetricFamily("cri_resmgr_released_on_exit", "Containers released when seen exited",
                                  value=s.released_on_exit)
        yield CounterMetricFamily("cri_resmgr_requests_not_met",
                                  "Containers a policy placed without what they asked for (exclusive CPUs, "
                                  "room in a balloon...): each is logged",
                                  value=s.exclusive_denied)
        # The name before balloons and topology-aware: the same count, kept for dashboards.
        yield CounterMetricFamily("cri_resmgr_exclusive_cpus_denied",
                                  "Deprecated: cri_resmgr_requests_not_met", value=s.exclusive_denied)
        yield CounterMetricFamily("cri_resmgr_updates_sent", "UpdateContainerResources sent on the relay's own",
                                  value=s.updates_sent)
        yield CounterMetricFamily("cri_resmgr_updates_failed", "Unsolicited updates given up after retries",
                                  value=s.updates_failed)
        yield CounterMetricFamily("cri_resmgr_updates_resent_after_start",
                                  "Updates that raced the container's StartContainer, sent again after it",
                                  value=s.updates_resent_after_start)
        yield _gauge("cri_resmgr_containers", "Containers tracked by the cache", s.containers)
        if s.dump_dropped is not None:
            yield CounterMetricFamily("cri_resmgr_dump_dropped", "Dump messages dropped (queue full)",
                                      value=s.dump_dropped)
        r = s.reconcile
        yield CounterMetricFamily("cri_resmgr_reconcile_runs", "Periodic reconciles with the runtime", value=r.runs)
        yield CounterMetricFamily("cri_resmgr_reconcile_failures", "Reconciles that failed (runtime away)",
                                  value=r.failed)
        fixed = CounterMetricFamily("cri_resmgr_reconcile_fixed_containers",
                                    "What reconciles fixed: containers removed behind the relay's back and "
                                    "released (gone), running ones it did not know and placed (adopted), "
                                    "running ones whose cgroup's cpuset was not the policy's, sent it again (resent)",
                                    labels=["action"])
        fixed.add_metric(["gone"], r.gone)
        fixed.add_metric(["adopted"], r.adopted)
        fixed.add_metric(["resent"], r.resent)
        yield fixed
        yield from _class_families(s.classes)
        if s.cpu_classes.cpus or s.cpu_classes.writes or s.cpu_classes.failures:
            yield from _cpu_class_families(s.cpu_classes)
        yield from _node_families(s.node)
        if s.reload.ok is not None:  # as Prometheus' own prometheus_config_last_reload_*
            yield _gauge("cri_resmgr_config_last_reload_successful", "Whether the last configuration tried (start-up, "
                         "agent push, SIGHUP) went into force (1) or was refused (0)", 1 if s.reload.ok else 0)
            yield _gauge("cri_resmgr_config_last_reload_timestamp_seconds",
                         "When the last configuration was tried (Unix time)", s.reload.at)
            yield _gauge("cri_resmgr_config_last_reload_success_timestamp_seconds",
                         "When a configuration last went into force (Unix time; 0: never)", s.reload.last_success_at)

    def _transport_families(self, t: TransportStats) -> Iterator[Metric]:
        if t.runtime_up is not None:
            yield _gauge("cri_resmgr_runtime_up", "Whether the relay's last runtime connection attempt worked (1) "
                         "or not (0)", 1 if t.runtime_up else 0)
        if not t.calls:
            return
        latency = HistogramMetricFamily("cri_resmgr_relay_call_duration_seconds",
                                        "CRI calls through the relay, from the request's headers to the call's end",
                                        labels=["method", "handling"])
        errors = CounterMetricFamily("cri_resmgr_runtime_errors",
                                     "CRI calls the runtime answered with a non-OK gRPC status",
                                     labels=["method", "code"])
        for c in sorted(t.calls, key=lambda c: (c.method, c.intercepted)):
            latency.add_metric([c.method, "intercepted" if c.intercepted else "passthrough"],
                               _buckets(c.latency), c.latency.sum_ns / 1e9)
        merged: dict[tuple[str, str], int] = {}
        for c in t.calls:
            for code, n in c.errors.items():
                merged[(c.method, code)] = merged.get((c.method, code), 0) + n
        for (method, code), n in sorted(merged.items()):
            errors.add_metric([method, code], n)
        yield latency
        yield errors

    def _usage_families(self, u: NodeUsage) -> Iterator[Metric]:
        cpus = GaugeMetricFamily("cri_resmgr_pool_cpus", "CPUs of a pool (its capacity)", labels=["pool"])
        excl = GaugeMetricFamily("cri_resmgr_pool_exclusive_cpus", "CPUs of a pool given to containers exclusively",
                                 labels=["pool"])
        shared = GaugeMetricFamily("cri_resmgr_pool_shared_cpus",
                                   "CPUs of a pool its shared containers run on now", labels=["pool"])
        for p in u.pools:
            cpus.add_metric([p.name], len(p.cpus))
            excl.add_metric([p.name], len(p.exclusive))
            shared.add_metric([p.name], len(p.shared))
        yield from (cpus, excl, shared)
        yield from _pool_detail_families(u)
        members = GaugeMetricFamily("cri_resmgr_pool_containers",
                                    "Containers placed, by the pool named in their assignment", labels=["pool"])
        for name, n in sorted(u.members.items()):
            members.add_metric([name], n)
        yield members
        free = GaugeMetricFamily("cri_resmgr_exclusive_free_cpus",
                                 "CPUs that a container could still get exclusively, per NUMA node",
                                 labels=["numa_node"])
        for node, s in sorted(u.exclusive_free.items()):
            free.add_metric([str(node)], len(s))
        yield free
        per = GaugeMetricFamily("cri_resmgr_container_exclusive_cpus",
                                f"Exclusive CPUs of a container (the {MAX_CONTAINER_SERIES} with the most)",
                                labels=["namespace", "pod", "container"])
        for c in u.containers[:MAX_CONTAINER_SERIES]:
            per.add_metric([c.namespace, c.pod, c.container], c.exclusive)
        yield per
        yield _gauge("cri_resmgr_container_exclusive_cpus_unlisted",
                     "Containers with exclusive CPUs left out of cri_resmgr_container_exclusive_cpus",
                     max(0, len(u.containers) - MAX_CONTAINER_SERIES))


def _pool_detail_families(u: NodeUsage) -> Iterator[Metric]:
    """What policies with many pools report (balloons, a pool tree): each pool's kind (a
    balloon type, a tree level), parent and memory nodes as labels of an info gauge, and
    the CPU its containers request. Only the pools that have a kind."""
    info = GaugeMetricFamily("cri_resmgr_pool_info", "A pool's kind (balloon type, tree level), parent and mems",
                             labels=["pool", "kind", "parent", "mems"])
    requested = GaugeMetricFamily("cri_resmgr_pool_requested_cpus",
                                  "CPUs the containers of a pool request (sum of requests)", labels=["pool"])
    members = GaugeMetricFamily("cri_resmgr_pool_member_containers", "Containers of a pool", labels=["pool"])
    detailed = [p for p in u.pools if p.kind]
    for p in detailed:
        info.add_metric([p.name, p.kind, p.parent, p.mems], 1)
        requested.add_metric([p.name], p.requested_milli / 1000)
        members.add_metric([p.name], len(p.containers))
    if detailed:
        yield from (info, requested, members)


def registry(engine: StatsSource, transport: TransportSource | None = None) -> CollectorRegistry:
    """A registry of our own: the engine's and transport's collector, and the
    process, platform and garbage-collector metrics (health.py serves it)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engine, transport))
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    return reg
