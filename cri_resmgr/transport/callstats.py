"""Per-method call latencies and runtime errors, counted by a transport for metrics.

The transport owns the counters (plain integers, `cri_resmgr.buckets`) and
hands out a snapshot (`contract.TransportStats`); it never imports metrics.
Keys are short method names from the method table, so the number of series is
bounded by it (~100); paths outside the table count as "unknown".
"""

from __future__ import annotations

import grpc

from cri_resmgr.buckets import Histogram
from cri_resmgr.transport.contract import MethodCalls

UNKNOWN_METHOD = "unknown"


class MethodStats:
    """One method's calls, intercepted or passed through."""

    __slots__ = ("latency", "errors")

    def __init__(self) -> None:
        self.latency = Histogram()
        self.errors: dict[grpc.StatusCode, int] = {}  # the runtime's non-OK statuses

    def error(self, code: grpc.StatusCode) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1


class CallStats:
    def __init__(self) -> None:
        self._by: dict[tuple[str, bool], MethodStats] = {}

    def method(self, name: str | None, intercepted: bool) -> MethodStats:
        """The counters of a method; routes keep a reference, so a lookup is per route, not per call."""
        key = (name or UNKNOWN_METHOD, intercepted)
        stats = self._by.get(key)
        if stats is None:
            stats = self._by[key] = MethodStats()
        return stats

    def snapshot(self) -> tuple[MethodCalls, ...]:
        return tuple(MethodCalls(method=name, intercepted=intercepted, latency=s.latency.snapshot(),
                                 errors={code.name: n for code, n in list(s.errors.items())})
                     for (name, intercepted), s in list(self._by.items()))
