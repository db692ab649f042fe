"""engine/resize.py: a container's new size read from kubelet's UpdateContainerResources,
compared in kubelet's own units."""

from __future__ import annotations

import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine import resize
from cri_resmgr.policy.api import QoS, Workload

MiB = 1 << 20


def w(qos=QoS.GUARANTEED, cpu=1500, limit=1500, mem=64 * MiB, mem_limit=64 * MiB) -> Workload:
    return Workload(key="k", namespace="ns", pod="p", name="c", qos=qos, cpu_request=cpu, cpu_limit=limit,
                    memory_request=mem, memory_limit=mem_limit)


def kubelet(request: int, limit: int | None, memory: int = 0, period: int = 100000) -> pb.LinuxContainerResources:
    """What kubelet derives from a container's sizes (pkg/kubelet/cm/helpers_linux.go)."""
    return pb.LinuxContainerResources(
        cpu_shares=resize.milli_cpu_to_shares(request), cpu_period=period,
        cpu_quota=resize.milli_cpu_to_quota(limit, period) if limit else 0, memory_limit_in_bytes=memory)


@pytest.mark.parametrize("milli", [1, 2, 10, 333, 999, 1500, 2000, 12345])
def test_the_same_size_in_kubelet_units_is_no_change(milli):
    # 333m is 340 shares, which reads back as 332m: no resize for a request that only changed form.
    assert resize.read(w(cpu=milli, limit=milli), kubelet(milli, milli, 64 * MiB)) is None


def test_a_cpu_resize_is_read_and_decided():
    r = resize.read(w(), kubelet(2000, 2000, 64 * MiB))
    assert r is not None and r.decide
    assert (r.workload.cpu_request, r.workload.cpu_limit) == (2000, 2000)
    assert r.workload.qos is QoS.GUARANTEED  # never changes in a resize
    assert r.describe() == "cpu request 2000m, limit 2000m"


def test_a_memory_limit_alone_is_recorded_without_a_decision():
    r = resize.read(w(qos=QoS.BURSTABLE, cpu=500, limit=None, mem=32 * MiB, mem_limit=64 * MiB),
                    kubelet(500, None, 128 * MiB))
    assert r is not None and not r.decide
    assert (r.workload.memory_request, r.workload.memory_limit) == (32 * MiB, 128 * MiB)


def test_guaranteed_memory_follows_its_limit_and_is_decided():
    r = resize.read(w(), kubelet(1500, 1500, 128 * MiB))
    assert r is not None and r.decide  # memory pinning follows the new size
    assert r.workload.memory_request == r.workload.memory_limit == 128 * MiB


def test_a_burstable_request_above_the_new_memory_limit_is_capped():
    r = resize.read(w(qos=QoS.BURSTABLE, cpu=500, limit=None, mem=96 * MiB, mem_limit=128 * MiB),
                    kubelet(500, None, 64 * MiB))
    assert r is not None and r.workload.memory_request == 64 * MiB


def test_an_update_that_says_nothing_about_sizes_changes_nothing():
    # NRI and other callers leave out what they do not change; kubelet always sends shares.
    assert resize.read(w(), pb.LinuxContainerResources(cpuset_cpus="0-3")) is None


def test_burstable_limit_added_and_removed():
    b = w(qos=QoS.BURSTABLE, cpu=500, limit=None, mem=0, mem_limit=None)
    added = resize.read(b, kubelet(500, 1000))
    assert added is not None and added.workload.cpu_limit == 1000 and added.decide
    removed = resize.read(added.workload, kubelet(500, None))
    assert removed is not None and removed.workload.cpu_limit is None


def test_a_guaranteed_limit_is_never_dropped_by_an_update_without_quota():
    r = resize.read(w(), pb.LinuxContainerResources(cpu_shares=resize.milli_cpu_to_shares(1500)))
    assert r is None
