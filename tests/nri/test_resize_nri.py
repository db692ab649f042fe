"""In-place resize through the real `cri-resmgr-nri` process: the runtime's UpdateContainer
with kubelet's new shares and quota (the runtime double; static policy, 8 CPUs, 1 reserved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri import ttrpc
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, pod
from tests.nri.test_plugin_process import run

MEMORY = 1 << 28


def sized(milli: int) -> api.LinuxResources:
    """kubelet's resources for a Guaranteed container of `milli` CPU, as NRI carries them."""
    r = api.LinuxResources()
    r.cpu.shares.value = milli * 1024 // 1000
    r.cpu.period.value = 100000
    r.cpu.quota.value = milli * 100
    r.memory.limit.value = MEMORY
    return r


def test_resize_through_nri_moves_cpus_and_refuses_what_cannot_fit(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        await double.run_pod(pod("b", "besteffort"))
        await double.create(container("be", "b"))
        await double.run_pod(pod("g", "guaranteed"))
        await double.create(container("g1", "g", milli_cpu=1500, limit_milli=1500, memory=MEMORY))
        shared = CPUSet.parse(double.cpus("be"))
        assert CPUSet.parse(double.cpus("g1")) == shared  # 1500m: shared

        reply = await double.update("g1", sized(3000))  # to 3 CPUs: exclusive
        mine = CPUSet.parse(double.cpus("g1"))
        assert len(mine) == 3
        assert [u.container_id for u in reply.update if u.container_id != "g1"] == ["be"]
        assert CPUSet.parse(double.cpus("be")) == shared - mine

        await double.update("g1", sized(2000))  # to 2: within what it had
        two = CPUSet.parse(double.cpus("g1"))
        assert len(two) == 2 and two < mine
        assert CPUSet.parse(double.cpus("be")) == shared - two

        with pytest.raises(ttrpc.TtrpcError) as e:  # to 8: one CPU is reserved
            await double.update("g1", sized(8000))
        assert e.value.code == ttrpc.Code.RESOURCE_EXHAUSTED
        assert "cannot resize default/pod-g:ctr-g1" in str(e.value)
        assert CPUSet.parse(double.cpus("g1")) == two  # nothing moved
        assert CPUSet.parse(double.cpus("be")) == shared - two

        await double.update("g1", sized(500))  # shared again: the BestEffort container grows back
        assert CPUSet.parse(double.cpus("be")) == shared
        assert CPUSet.parse(double.cpus("g1")) == shared
        assert double.unsolicited == []

    plugin = run(workdir, scenario)
    assert "resized to cpu request 3000m" in plugin.log()


def test_pod_level_resources_reach_the_engine_from_nri() -> None:
    from cri_resmgr.nri.hooks import pod_resources

    p = pod("p", "guaranteed")
    p.linux.pod_resources.cpu.shares.value = 2048
    p.linux.pod_resources.cpu.quota.value = 200000
    p.linux.pod_resources.cpu.period.value = 100000
    found = pod_resources(p)
    assert found is not None and (found.cpu_request, found.cpu_limit) == (2000, 2000)
    assert pod_resources(pod("q")) is None
    p.linux.pod_resources.Clear()  # given, but saying nothing
    assert p.linux.HasField("pod_resources") and pod_resources(p) is None
