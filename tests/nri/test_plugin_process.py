"""The real `cri-resmgr-nri` process, driven by the in-process NRI runtime double,
with the static policy on a generated 8-CPU machine (1 socket, 4 cores, 2 threads;
1 CPU reserved)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri import ttrpc
from cri_resmgr.nri.hooks import EVENTS, POD_RESIZE_EVENTS, event_mask
from cri_resmgr.nri.mux import PLUGIN_SERVICE_CONN, frame
from cri_resmgr.nri.plugin import PLUGIN_SERVICE
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr_agent.relay_client import RelayConfigClient
from tests.nri.plugin_process import STATIC, PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod

ONLINE = CPUSet.parse("0-7")


def run(workdir: Path, scenario: Callable[[RuntimeDouble, PluginProcess], Awaitable[None]],
        args: tuple[str, ...] = (), forced: str | None = STATIC, runtime_config: str = "",
        prepare: Callable[[RuntimeDouble], None] | None = None) -> PluginProcess:
    """The double listening, the plugin process started against it, the scenario run;
    both stopped again whatever happens. `forced`: the -force-config text (None: no such
    flag); `runtime_config`: what the double's Configure hands the plugin as its configuration;
    `prepare`: sets the double up before the plugin starts."""
    plugin = PluginProcess(workdir, str(workdir / "nri.sock"), str(workdir / "host"), config=forced, args=args)

    async def main() -> None:
        double = RuntimeDouble(plugin.nri_socket)
        double.plugin_config = runtime_config
        if prepare is not None:  # what the runtime holds and does before the plugin starts
            prepare(double)
        await double.start()
        plugin.start()
        try:
            await scenario(double, plugin)
        finally:
            await asyncio.to_thread(plugin.stop)
            await double.close()

    try:
        asyncio.run(main())
    except BaseException:
        print(plugin.log())
        raise
    return plugin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def cpus(text: str) -> CPUSet:
    return CPUSet.parse(text)


def test_static_policy_places_and_releases_through_nri(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        session = await double.wait_ready()
        assert session.registered is not None
        assert (session.registered.plugin_name, session.registered.plugin_idx) == ("cri-resmgr", "90")
        # The double says NRI v0.10: UpdatePodSandbox is asked for too.
        assert session.configured is not None and session.configured.events == event_mask(EVENTS + POD_RESIZE_EVENTS)
        # Synchronize: the running container was adopted into the shared pool.
        shared = cpus(double.cpus("a1"))
        assert shared == ONLINE  # the static policy's shared pool includes the reserved CPU

        await double.run_pod(pod("g", "guaranteed"))
        reply = await double.create(guaranteed("g1", "g", 2))
        exclusive = cpus(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 2
        # The shared container was told its new CPUs in the same reply.
        assert [u.container_id for u in reply.update] == ["a1"]
        assert cpus(double.cpus("a1")) == shared - exclusive

        # kubelet's update keeps the policy's cpuset.
        upd = await double.update("g1", api.LinuxResources(cpu=api.LinuxCPU(cpus="0-7")))
        assert cpus(double.cpus("g1")) == exclusive
        assert any(u.container_id == "g1" for u in upd.update)

        stopped = await double.stop("g1")
        assert [u.container_id for u in stopped.update] == ["a1"]
        assert cpus(double.cpus("a1")) == shared
        await double.remove("g1")
        assert double.unsolicited == []  # everything went in the hooks' replies

        # The relay's metrics and introspection, from the plugin.
        metrics = await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/metrics")
        assert 'cri_resmgr_relay_call_duration_seconds_count{handling="intercepted",method="CreateContainer"} 1.0' \
            in metrics
        assert "cri_resmgr_runtime_up 1.0" in metrics and 'cri_resmgr_policy_active{policy="static"} 1.0' in metrics
        state = await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/state")
        assert "ctr-a1" in state and "ctr-g1" not in state

    dump = workdir / "dump.txt"
    port = free_port()
    plugin = run(workdir, scenario, args=("-dump", "full:.*CreateContainer", "-dump-file", str(dump),
                                          "-metrics-address", f"127.0.0.1:{port}"))
    assert "registered with the runtime as NRI plugin 90-cri-resmgr" in plugin.log()
    # The NRI calls it saw, in the dumper's format, decoded.
    text = dump.read_text()
    assert "/nri.pkg.api.v1alpha1.Plugin/CreateContainer" in text and "ctr-g1" in text


def test_plugin_restart_resynchronizes_without_double_booking(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        double.pods["g"] = pod("g", "guaranteed")
        first = cpus((await double.create(guaranteed("g1", "g", 2))).adjust.linux.resources.cpu.cpus)

        await asyncio.to_thread(plugin.stop)  # the plugin restarts; the runtime keeps its containers
        plugin.start()
        await double.wait_ready(count=2)
        assert cpus(double.cpus("g1")) == first  # kept, from the state file
        second = cpus((await double.create(guaranteed("g2", "g", 2))).adjust.linux.resources.cpu.cpus)
        assert len(second) == 2 and not (first & second)
        assert not (cpus(double.cpus("a1")) & (first | second))

    run(workdir, scenario)


def test_runtime_restart_reconnects_and_resynchronizes(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        double.pods["g"] = pod("g", "guaranteed")
        exclusive = cpus((await double.create(guaranteed("g1", "g", 2))).adjust.linux.resources.cpu.cpus)
        shrunk = cpus(double.cpus("a1"))

        await double.drop()  # the runtime goes away...
        del double.containers["g1"]  # ...and comes back without g1
        session = await double.wait_ready(count=2)
        # The new Synchronize released g1's CPUs: the shared container gets them back.
        assert session.synchronized is not None
        assert cpus(double.cpus("a1")) == shrunk | exclusive
        again = cpus((await double.create(guaranteed("g2", "g", 2))).adjust.linux.resources.cpu.cpus)
        assert len(again) == 2

    plugin = run(workdir, scenario)
    assert "lost the NRI connection" in plugin.log()


def test_bad_calls_get_errors_and_the_plugin_goes_on(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        session = await double.wait_ready()
        client = session.plugin
        with pytest.raises(ttrpc.TtrpcError) as unknown:
            await client.call(PLUGIN_SERVICE, "NoSuchHook", b"", 2.0)
        assert unknown.value.code == ttrpc.Code.UNIMPLEMENTED
        with pytest.raises(ttrpc.TtrpcError) as malformed:
            await client.call(PLUGIN_SERVICE, "CreateContainer", b"\xff\xff\xff", 2.0)
        assert malformed.value.code == ttrpc.Code.INTERNAL  # as Go's ttRPC answers (tests/nri/interop)
        # An oversized ttRPC message on stream 101: answered RESOURCE_EXHAUSTED.
        conn = session.mux.open(PLUGIN_SERVICE_CONN)
        conn.write(ttrpc.HEADER.pack(ttrpc.MAX_MESSAGE + 1, 101, ttrpc.TYPE_REQUEST, 0)
                   + b"\0" * (ttrpc.MAX_MESSAGE + 1))
        # The plugin still serves.
        double.pods["p1"] = pod("p1", "besteffort")
        reply = await double.create(container("b1", "p1"))
        assert cpus(double.cpus("b1")) <= ONLINE and reply.adjust.linux.resources.cpu.cpus
        # A malformed multiplexer frame: the plugin drops the connection and dials again.
        session.mux._writer.write(frame(1, b"x")[:4] + (0xFFFFFFFF).to_bytes(4, "big"))
        await double.wait_ready(count=2)

    plugin = run(workdir, scenario)
    log = plugin.log()
    assert "NoSuchHook is not implemented" in log
    assert "announces" in log  # the bad frame, named


def test_synchronize_in_parts_and_a_second_plugin_on_the_same_state_dir(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.sync_parts = 3
        for i in range(6):
            double.pods[f"p{i}"] = pod(f"p{i}", "burstable")
            double.containers[f"c{i}"] = container(f"c{i}", f"p{i}", milli_cpu=100)
        await double.wait_ready()
        assert all(cpus(double.cpus(f"c{i}")) == ONLINE for i in range(6))
        # A second front end on the same state directory is refused while this one runs.
        other = PluginProcess(workdir / "other", plugin.nri_socket, plugin.host_root)
        other.state_dir = plugin.state_dir
        other.start()
        assert other.proc is not None
        code = await asyncio.to_thread(other.proc.wait, 30)
        assert code == 1
        assert "is in use by cri-resmgr NRI plugin" in other.log()

    run(workdir, scenario)


def test_pod_stop_releases_its_containers_with_unsolicited_updates(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        double.pods["g"] = pod("g", "guaranteed")
        await double.create(guaranteed("g1", "g", 2))
        assert cpus(double.cpus("a1")) != ONLINE
        await double.stop_pod("g")  # StopPodSandbox's reply has no updates: UpdateContainers carries them
        for _ in range(100):
            if double.unsolicited:
                break
            await asyncio.sleep(0.05)
        assert [u.container_id for u in double.unsolicited] == ["a1"]
        assert cpus(double.cpus("a1")) == ONLINE

    run(workdir, scenario)


def test_a_reconfiguration_reaches_running_containers_with_unsolicited_updates(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        assert cpus(double.cpus("a1")) == ONLINE
        # Fewer CPUs for the policy, re-read on SIGHUP: the running container hears of it.
        plugin.config_path.write_text(STATIC_0_5)
        assert plugin.proc is not None
        os.kill(plugin.proc.pid, signal.SIGHUP)
        for _ in range(200):
            if double.unsolicited:
                break
            await asyncio.sleep(0.05)
        assert [u.container_id for u in double.unsolicited] == ["a1"]
        assert cpus(double.cpus("a1")) == CPUSet.parse("0-5")

    plugin = run(workdir, scenario)
    assert "SIGHUP: reloaded" in plugin.log()


STATIC_0_5 = "policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n  AvailableResources:\n    CPU: \"0-5\"\n"


def test_the_agents_configuration_is_applied_as_by_the_relay(workdir: Path) -> None:
    config_socket = str(workdir / "config.sock")

    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        assert double.cpus("a1") == ""  # -policy none until the agent speaks: nothing decided

        def push() -> str | None:
            client = RelayConfigClient(config_socket)
            try:
                module = 'Active: static\nReservedResources: {CPU: 1}\nAvailableResources: {CPU: "0-5"}\n'
                return client.set_config("node1", {"policy": module}, "test agent", "1")
            finally:
                client.close()

        assert await asyncio.to_thread(push) is None
        for _ in range(200):
            if double.unsolicited:
                break
            await asyncio.sleep(0.05)
        assert cpus(double.cpus("a1")) == CPUSet.parse("0-5")

    plugin = run(workdir, scenario, args=("-config-socket", config_socket))
    assert "configuration from test agent in force: policy static" in plugin.log()


def test_a_plugin_started_before_the_runtime_connects_once_it_is_there(workdir: Path) -> None:
    plugin = PluginProcess(workdir, str(workdir / "nri.sock"), str(workdir / "host"))

    async def main() -> None:
        plugin.start()
        double = RuntimeDouble(plugin.nri_socket)
        try:
            for _ in range(600):  # until the plugin has tried and failed at least once
                if "cannot connect to NRI" in plugin.log():
                    break
                await asyncio.sleep(0.05)
            await double.start()
            session = await double.wait_ready()
            assert session.registered is not None
        finally:
            await asyncio.to_thread(plugin.stop)
            await double.close()

    try:
        asyncio.run(main())
    except BaseException:
        print(plugin.log())
        raise
    assert plugin.log().count("cannot connect to NRI") == 1  # logged once per outage, not per attempt


def test_a_launched_plugins_configuration_comes_from_the_runtimes_configure(workdir: Path) -> None:
    """NRI hands a plugin it launches (no flags) its configuration file's text in
    ConfigureRequest.config: with no -force-config or -fallback-config it is the fallback."""
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        await double.run_pod(pod("g", "guaranteed"))
        reply = await double.create(guaranteed("g1", "g", 2))
        exclusive = cpus(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 2  # the static policy of the runtime's text decided
        assert cpus(double.cpus("a1")) == ONLINE - exclusive

    plugin = run(workdir, scenario, forced=None, runtime_config=STATIC)
    assert "the runtime's configuration for this plugin (" in plugin.log()
    assert "policy static active" in plugin.log()


def test_a_given_force_config_wins_over_the_runtimes_configuration(workdir: Path) -> None:
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        await double.run_pod(pod("g", "guaranteed"))
        reply = await double.create(guaranteed("g1", "g", 2))
        assert len(cpus(reply.adjust.linux.resources.cpu.cpus)) == 2  # static, from -force-config

    plugin = run(workdir, scenario, runtime_config="policy:\n  Active: none\n")
    assert "is ignored: -force-config is given" in plugin.log()


def test_a_bad_configuration_from_the_runtime_is_named_in_the_error(workdir: Path) -> None:
    exited: list[int | None] = []

    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        assert plugin.proc is not None
        for _ in range(300):  # the plugin gives up on a configuration it cannot apply
            if plugin.proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        exited.append(plugin.proc.poll())

    plugin = run(workdir, scenario, forced=None, runtime_config="policy:\n  Active: static\n  NoSuchKey: 1\n")
    log = plugin.log()
    assert exited[0] not in (None, 0), log
    assert "ConfigureRequest.config" in log and "NoSuchKey" in log, log
