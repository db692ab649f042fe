"""Crash detection when kubelet lists with StreamContainers (kubelet 1.36, KEP-5825): the
whole engine behind either transport, in front of a runtime double that streams.

A container that exits behind the relay's back (it crashed; nobody called StopContainer)
holds its exclusive CPUs until crash detection sees it. With ListContainers the CPUs
come back before kubelet's listing returns; a StreamContainers listing must do the
same, and one that fails midway must release nothing: kubelet drops it and lists again.
"""

from __future__ import annotations

import grpc
import pytest
from test_engine_fake_runtime import STATIC, Engine, guaranteed

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import Kubelet

SHAPE = dict(sockets=1, cores_per_die=4, threads_per_core=2)


@pytest.fixture(params=["h2", "grpc"])
def transport(request):
    return request.param


def _crash(e: Engine, cid: str) -> None:
    e.fake.containers[cid]["state"] = pb.ContainerState.CONTAINER_EXITED


def _holds(e: Engine, cid: str) -> bool:
    """Whether the policy still gives the container exclusive CPUs."""
    return not CPUSet(e.fake.cpuset(cid)).isdisjoint(CPUSet(_exclusive(e)))


def _exclusive(e: Engine) -> str:
    policy = e.ctl.active_policy()
    return str(e.ctl.topology().online - policy.shared - policy.reserved)


@pytest.mark.parametrize("kubelet_version", ["1.35", "1.36"])
def test_a_crashed_container_is_released_before_the_listing_returns(engine_factory, transport, kubelet_version):
    e: Engine = engine_factory(SHAPE, STATIC, transport=transport)
    kubelet = Kubelet("unix://" + e.relay_sock, cgroup_root="/crirm-fake-nonexistent/kubepods",
                      kubelet_version=kubelet_version)
    try:
        e.fake.stream_batch = 1  # one container a message: the exited one is in the middle
        pods = [kubelet.start_pod(guaranteed(f"g{i}", "1")) for i in range(3)]
        crashed = pods[1].container_ids["c"]
        assert _holds(e, crashed)
        _crash(e, crashed)
        assert {p.id for p in kubelet.list_pods()} == {p.sandbox_id for p in pods}
        listed = kubelet.list_containers()
        # Released by the time kubelet has its list: the relay held the listing's status for it.
        assert e.ctl.stats().released_on_exit == 1
        assert kubelet.streams_lists is (kubelet_version == "1.36")
        assert {c.id for c in listed} == {p.container_ids["c"] for p in pods}
        assert not _holds(e, crashed)
        assert all(_holds(e, p.container_ids["c"]) for p in (pods[0], pods[2]))
    finally:
        kubelet.close()


def test_a_stream_that_fails_midway_releases_nothing(engine_factory, transport):
    e: Engine = engine_factory(SHAPE, STATIC, transport=transport)
    kubelet = Kubelet("unix://" + e.relay_sock, cgroup_root="/crirm-fake-nonexistent/kubepods",
                      kubelet_version="1.36")
    try:
        e.fake.stream_batch = 1
        pods = [kubelet.start_pod(guaranteed(f"g{i}", "1")) for i in range(3)]
        crashed = pods[0].container_ids["c"]
        _crash(e, crashed)
        # The exited container's message passes; the runtime fails the stream after it.
        e.fake.stream_fails = 2
        with pytest.raises(grpc.RpcError) as failed:
            kubelet.list_containers()
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        e.flush()
        assert e.ctl.stats().released_on_exit == 0
        assert _holds(e, crashed)
        # kubelet's next relist is whole: released then.
        e.fake.stream_fails = None
        kubelet.list_containers()
        assert e.ctl.stats().released_on_exit == 1
        assert not _holds(e, crashed)
    finally:
        kubelet.close()


def test_kubelet_136_reads_its_cgroup_driver_through_the_relay(engine_factory, transport):
    e: Engine = engine_factory(SHAPE, STATIC, transport=transport)
    kubelet = Kubelet("unix://" + e.relay_sock, kubelet_version="1.36")
    try:
        assert (kubelet.cgroup_driver, kubelet.cgroup_driver_from) == ("cgroupfs", "runtime")
    finally:
        kubelet.close()
