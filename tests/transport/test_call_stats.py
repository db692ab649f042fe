"""Both transports' per-call counters: what metrics read (no prometheus_client here).

Timed only when asked for (the relay is built with timed=True when metrics are
served); latencies per method, intercepted apart from passed through; the
runtime's non-OK statuses by code; a made-up path counts as "unknown".
"""

from __future__ import annotations

import grpc
import pytest
from test_relay_transport import V1, Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.buckets import BOUNDS_NS
from cri_resmgr.transport.contract import TransportStats


@pytest.fixture(params=["h2", "grpc"])
def make(tmp_path, request):
    made = []

    def _make(**kw):
        s = Setup(tmp_path, transport=request.param, **kw)
        made.append(s)
        return s

    yield _make
    for s in made:
        s.close()


def _by_method(stats: TransportStats):
    return {(c.method, c.intercepted): c for c in stats.calls}


def test_untimed_relay_counts_nothing_per_call(make):
    s = make()
    s.call(V1 + "Version")
    stats = s.relay.stats()
    assert stats.runtime_up is True and stats.calls == ()


def test_latency_per_method_intercepted_apart_and_errors_by_code(make):
    async def create(req):
        return await req.forward(req.message)

    s = make(timed=True, interceptors={"CreateContainer": create})
    for _ in range(5):
        s.call(V1 + "Version")
    s.call(V1 + "CreateContainer", pb.CreateContainerRequest(pod_sandbox_id="p").SerializeToString())
    for _ in range(2):
        with pytest.raises(grpc.RpcError) as e:
            s.call(V1 + "ContainerStatus")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError):
        s.call("/runtime.v1.RuntimeService/UnknownThing")
    s.call("/example.Future/Thing", b"x")

    calls = _by_method(s.relay.stats())
    version = calls[("Version", False)]
    assert version.latency.count == 5 and len(version.latency.counts) == len(BOUNDS_NS) + 1
    assert 0 < version.latency.sum_ns < 5 * 10**9
    assert version.errors == {}
    assert calls[("CreateContainer", True)].latency.count == 1
    assert calls[("ContainerStatus", False)].errors == {"NOT_FOUND": 2}
    unknown = calls[("unknown", False)]
    assert unknown.latency.count == 2 and unknown.errors == {"UNIMPLEMENTED": 1}

    # A snapshot is a copy: later calls do not change it.
    before = s.relay.stats()
    s.call(V1 + "Version")
    assert _by_method(before)[("Version", False)].latency.count == 5
    assert _by_method(s.relay.stats())[("Version", False)].latency.count == 6
