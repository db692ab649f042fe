"""The plugin is active from Configure, not from a Synchronize that may never come
(containerd before 1.7.26 sends none to the plugins it launches), and containers it
was never told of (they predate it, or were created while it synchronized:
containerd#13698) are placed once an event names them. The real `cri-resmgr-nri`
against the runtime double; tests/nri/test_real_runtimes.py does the same on
containerd 1.7.24 and 2.1.9."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.plugin_process import STATIC, PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod
from tests.nri.test_plugin_process import run

ONLINE = CPUSet.parse("0-7")


async def until(what: str, ok, plugin: PluginProcess, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        await asyncio.sleep(0.05)


def test_without_synchronize_the_configuration_is_in_force_from_configure(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        assert double.session.synchronized is None  # and never will be
        double.pods["g"] = pod("g", "guaranteed")
        reply = await double.create(guaranteed("g1", "g", 2))
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 2  # the runtime's configuration (static) decided
        assert "policy static active" in plugin.log()

        # a1 ran before the plugin: unknown, untouched, until an event names it.
        assert double.cpus("a1") == ""
        await until("the note on the missing Synchronize", lambda: "no Synchronize from double" in plugin.log(),
                    plugin)
        await double.update("a1", api.LinuxResources(cpu=api.LinuxCPU(shares=api.OptionalUInt64(value=512))))
        await until("a1 placed", lambda: double.cpus("a1") != "", plugin)
        assert CPUSet.parse(double.cpus("a1")) == ONLINE - exclusive
        assert plugin.log().count("no Synchronize from") == 1
        assert "container a1 was not reported to this plugin before: adopting it" in plugin.log()

        # What the plugin cannot see stays fail-safe: a restart keeps g1's CPUs (the
        # saved state is restored as saved, nothing judged gone without a listing).
        await asyncio.to_thread(plugin.stop)
        plugin.start()
        await double.wait_ready(count=2)
        second = CPUSet.parse((await double.create(guaranteed("g2", "g", 2))).adjust.linux.resources.cpu.cpus)
        assert len(second) == 2 and not (second & exclusive)

    def prepare(double: RuntimeDouble) -> None:
        double.send_synchronize = False
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)

    run(workdir, scenario, forced=None, runtime_config=STATIC, prepare=prepare)


def test_container_created_while_the_plugin_synchronizes_is_placed_at_its_first_event(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        assert "h1" not in [u.container_id for u in double.session.synchronized.update]  # type: ignore[union-attr]
        double.pods["g"] = pod("g", "guaranteed")
        exclusive = CPUSet.parse((await double.create(guaranteed("g1", "g", 2))).adjust.linux.resources.cpu.cpus)
        assert double.cpus("h1") == ""  # never reported: not placed, not shrunk
        await double.start_event("h1")
        await until("h1 placed", lambda: double.cpus("h1") != "", plugin)
        assert CPUSet.parse(double.cpus("h1")) == ONLINE - exclusive == CPUSet.parse(double.cpus("a1"))

    def prepare(double: RuntimeDouble) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        double.hidden = [container("h1", "p1", milli_cpu=250, state=api.CONTAINER_CREATED)]

    run(workdir, scenario, prepare=prepare)
