"""A pod-level resize through the real `cri-resmgr-nri` process: NRI's UpdatePodSandbox,
subscribed to only where the runtime has it (the runtime double as containerd 2.3 with NRI
v0.12, and as containerd 2.1.9, which refuses a plugin asking for it); static policy, 8
CPUs, 1 reserved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.hooks import EVENTS, POD_RESIZE_EVENTS, event_mask, pod_resize_support
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, pod
from tests.nri.test_plugin_process import run

MEMORY = 1 << 28
POD_RESIZE_BIT = 1 << (api.UPDATE_POD_SANDBOX - 1)


def pod_size(cpus: int) -> api.LinuxResources:
    """A Guaranteed pod's pod-level resources of `cpus` CPUs, as NRI carries them."""
    r = api.LinuxResources()
    r.cpu.shares.value = cpus * 1024
    r.cpu.period.value = 100000
    r.cpu.quota.value = cpus * 100000
    r.memory.limit.value = MEMORY
    return r


async def changed(double: RuntimeDouble, cid: str, was: str) -> CPUSet:
    """The container's cpuset once an update after the hook's reply changed it."""
    while double.cpus(cid) == was:
        await asyncio.sleep(0.02)
    return CPUSet.parse(double.cpus(cid))


def test_a_pod_resize_moves_the_container_that_takes_the_pods_size_and_refuses_what_cannot_fit(
        workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        s = await double.wait_ready()
        assert s.refused is None and s.configured is not None and s.configured.events & POD_RESIZE_BIT
        assert s.registered is not None and s.registered.NRI_version == "v0.10.0"  # NRI v0.12's version exchange
        await double.run_pod(pod("b", "besteffort"))
        await double.create(container("be", "b"))
        p = pod("p", "guaranteed")
        p.linux.pod_resources.CopyFrom(pod_size(2))
        await double.run_pod(p)
        await double.create(container("c", "p"))  # no resources of its own: the pod's size
        two = CPUSet.parse(double.cpus("c"))
        shared = CPUSet.parse(double.cpus("be"))
        assert len(two) == 2 and shared.isdisjoint(two)

        await double.resize_pod("p", pod_size(4))
        four = await asyncio.wait_for(changed(double, "c", str(two)), 30)
        assert len(four) == 4 and two <= four
        be = await asyncio.wait_for(changed(double, "be", str(shared)), 30)
        assert be.isdisjoint(four) and len(be) == 4  # 8 CPUs less the pod's 4

        with pytest.raises(ttrpc.TtrpcError) as e:  # 8 CPUs: one is reserved
            await double.resize_pod("p", pod_size(8))
        assert e.value.code == ttrpc.Code.RESOURCE_EXHAUSTED
        assert "cannot resize default/pod-p:ctr-c" in str(e.value)
        assert CPUSet.parse(double.cpus("c")) == four and CPUSet.parse(double.cpus("be")) == be  # nothing moved
        assert double.pods["p"].linux.pod_resources.cpu.shares.value == 4 * 1024  # the runtime kept the old size

    plugin = run(workdir, scenario, prepare=lambda d: setattr(d, "mode", "0.12"))
    assert "subscribing to UpdatePodSandbox (pod-level resize): NRI v0.12.0 has it" in plugin.log()


def test_a_runtime_without_update_pod_sandbox_keeps_the_plugin(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        s = await double.wait_ready()
        assert s.refused is None and s.synchronized is not None  # registered, configured, synchronized
        assert s.configured is not None and s.configured.events == event_mask(EVENTS)

    plugin = run(workdir, scenario, prepare=lambda d: setattr(d, "mode", "2.1.9"))
    assert "not subscribing to UpdatePodSandbox (pod-level resize): containerd 2.1.9 predates it" in plugin.log()


def test_which_runtimes_get_asked_for_update_pod_sandbox() -> None:
    def asks(**kw: str) -> bool:
        return pod_resize_support(api.ConfigureRequest(**kw))[0]

    assert asks(runtime_name="containerd", runtime_version="2.3.4", NRI_version="v0.12.0")
    assert asks(runtime_name="containerd", runtime_version="2.2.0")  # no NRI version: by the release
    assert asks(runtime_name="containerd", runtime_version="v2.2.1+ds1")
    assert not asks(runtime_name="containerd", runtime_version="2.1.9")
    assert not asks(runtime_name="containerd", runtime_version="1.7.24~ds1")
    assert not asks(runtime_name="containerd", runtime_version="2.1.9", NRI_version="v0.9.0")
    assert asks(runtime_name="cri-o", runtime_version="1.35.0", NRI_version="v0.10.0")
    assert not asks(runtime_name="cri-o", runtime_version="1.35.0")  # not said: not asked
    assert not asks()
    assert event_mask(EVENTS + POD_RESIZE_EVENTS) & ~((1 << api.REMOVE_CONTAINER) - 1) == POD_RESIZE_BIT


def test_the_2_1_9_double_refuses_a_mask_with_update_pod_sandbox(workdir: Path) -> None:
    """The double's 2.1.9 mode does what containerd 2.1.9 does with such a plugin."""
    async def main() -> None:
        double = RuntimeDouble(str(workdir / "nri.sock"), mode="2.1.9")
        await double.start()
        try:
            from cri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, Mux
            from cri_resmgr.nri.plugin import PLUGIN_SERVICE, RUNTIME_SERVICE
            reader, writer = await asyncio.open_unix_connection(double.socket_path)
            mux = Mux(reader, writer)

            async def configure(data: bytes) -> bytes:
                return api.ConfigureResponse(events=event_mask(EVENTS + POD_RESIZE_EVENTS)).SerializeToString()

            server = ttrpc.Server(mux.open(PLUGIN_SERVICE_CONN), {(PLUGIN_SERVICE, "Configure"): configure})
            client = ttrpc.Client(mux.open(RUNTIME_SERVICE_CONN))
            tasks = [asyncio.create_task(mux.run()), asyncio.create_task(server.serve()),
                     asyncio.create_task(client.receive())]
            await client.call(RUNTIME_SERVICE, "RegisterPlugin",
                              api.RegisterPluginRequest(plugin_name="x", plugin_idx="10").SerializeToString(), 5)
            s = await double.wait_ready()
            assert s.refused == "invalid plugin events: 0x800" and s.synchronized is None
            mux.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await double.close()

    asyncio.run(main())
