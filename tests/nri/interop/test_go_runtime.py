"""The real `cri-resmgr-nri` process against a runtime side built on the real
containerd/ttrpc Go library: Go's ttRPC server takes the plugin's RegisterPlugin and
UpdateContainers, Go's ttRPC client calls the plugin's Configure, Synchronize and
hooks, every message encoded and decoded by Go types generated from protos/nri
(gogo protobuf, what NRI's Go code uses). The static policy on a generated 8-CPU
machine with 1 CPU reserved, as tests/nri/test_plugin_process.py."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri.hooks import event_mask
from cri_resmgr.nri.plugin import PLUGIN_SERVICE
from cri_resmgr.nri.ttrpc import MAX_MESSAGE, Code
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.interop.peer import GoPeer
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import container, guaranteed, pod

ONLINE = CPUSet.parse("0-7")


@pytest.fixture
def runtime(go_binary: Path, workdir: Path) -> Iterator[tuple[GoPeer, PluginProcess]]:
    """The Go runtime listening, the plugin started against it and registered."""
    sock = str(workdir / "nri.sock")
    go = GoPeer(go_binary, ["-mode", "runtime", "-socket", sock], workdir / "go.log")
    plugin = PluginProcess(workdir, sock, str(workdir / "host"))
    try:
        go.event("listening")
        plugin.start()
        yield go, plugin
    finally:
        plugin.stop()
        go.stop()
        # pytest shows a test's captured output only when it failed.
        print(plugin.log(), (workdir / "go.log").read_text(errors="replace"))


def configure(go: GoPeer, **fields: object) -> api.ConfigureResponse:
    req = api.ConfigureRequest(runtime_name="containerd", runtime_version="2.0.0", **fields)  # type: ignore[arg-type]
    return go.call(PLUGIN_SERVICE, "Configure", req, api.ConfigureResponse).decode(api.ConfigureResponse)


def cpus_of(updates: list[api.ContainerUpdate], cid: str) -> CPUSet:
    mine = [u for u in updates if u.container_id == cid]
    assert mine, f"no update for {cid} in {[u.container_id for u in updates]}"
    return CPUSet.parse(mine[-1].linux.resources.cpu.cpus)


def test_register_configure_synchronize_create_and_unsolicited_updates(
        runtime: tuple[GoPeer, PluginProcess]) -> None:
    go, plugin = runtime
    reg = api.RegisterPluginRequest()
    json_format.Parse(go.event("RegisterPlugin")["json"], reg)
    assert (reg.plugin_name, reg.plugin_idx) == ("cri-resmgr", "90")

    # A generous request timeout: the shared machine is slow (NRI lets runtimes configure it).
    conf = configure(go, registration_timeout=5000, request_timeout=20000, NRI_version="v0.9.0")
    assert conf.events == event_mask()

    p1, a1 = pod("p1", "burstable"), container("a1", "p1", milli_cpu=500)
    sync = go.call(PLUGIN_SERVICE, "Synchronize", api.SynchronizeRequest(pods=[p1], containers=[a1]),
                   api.SynchronizeResponse).decode(api.SynchronizeResponse)
    assert cpus_of(list(sync.update), "a1") == ONLINE  # adopted into the shared pool

    g = pod("g", "guaranteed")
    assert go.call(PLUGIN_SERVICE, "RunPodSandbox", api.RunPodSandboxRequest(pod=g),
                   api.RunPodSandboxResponse).code == Code.OK
    g1 = guaranteed("g1", "g", 2)
    g1.state = api.CONTAINER_CREATED
    created = go.call(PLUGIN_SERVICE, "CreateContainer", api.CreateContainerRequest(pod=g, container=g1),
                      api.CreateContainerResponse).decode(api.CreateContainerResponse)
    exclusive = CPUSet.parse(created.adjust.linux.resources.cpu.cpus)
    assert len(exclusive) == 2 and not exclusive & CPUSet.parse("0")  # CPU 0 is the reserved one
    assert cpus_of(list(created.update), "a1") == ONLINE - exclusive
    # NRI fails a creation whose reply updates the container being created.
    assert "g1" not in [u.container_id for u in created.update]

    # kubelet's update: the reply's update of g1 holds the policy's cpuset and nothing of
    # kubelet's (NRI applies it over the request; a field set is a field claimed).
    kubelet = api.LinuxResources(cpu=api.LinuxCPU(cpus="0-7"))
    kubelet.cpu.shares.value, kubelet.memory.limit.value = 2048, 1 << 28
    updated = go.call(PLUGIN_SERVICE, "UpdateContainer", api.UpdateContainerRequest(
        pod=g, container=g1, linux_resources=kubelet), api.UpdateContainerResponse).decode(api.UpdateContainerResponse)
    own = [u for u in updated.update if u.container_id == "g1"]
    assert len(own) == 1 and CPUSet.parse(own[0].linux.resources.cpu.cpus) == exclusive
    assert not own[0].linux.resources.HasField("memory") and not own[0].linux.resources.cpu.HasField("shares")

    # StopPodSandbox's reply carries no updates: the plugin calls UpdateContainers on
    # Go's ttRPC server with the shared container's CPUs given back.
    assert go.call(PLUGIN_SERVICE, "StopPodSandbox", api.StopPodSandboxRequest(pod=g),
                   api.StopPodSandboxResponse).code == Code.OK
    sent = api.UpdateContainersRequest()
    json_format.Parse(go.event("UpdateContainers")["json"], sent)
    assert cpus_of(list(sent.update), "a1") == ONLINE


def test_an_old_runtimes_bare_configure_and_synchronize_in_parts(runtime: tuple[GoPeer, PluginProcess]) -> None:
    """NRI v0.4 (containerd 1.7) sends Configure with no timeouts nor NRI version and
    one Synchronize; newer runtimes split it with `more`: only the last part's reply
    carries the updates."""
    go, _ = runtime
    go.event("RegisterPlugin")
    assert configure(go).events == event_mask()
    pods = [pod("p1", "burstable"), pod("p2", "besteffort")]
    ctrs = [container("a1", "p1", milli_cpu=500), container("b1", "p2")]
    first = go.call(PLUGIN_SERVICE, "Synchronize", api.SynchronizeRequest(pods=pods[:1], containers=ctrs[:1],
                                                                          more=True), api.SynchronizeResponse)
    part = first.decode(api.SynchronizeResponse)
    assert part.more and not part.update  # else NRI closes: "plugin does not handle split sync requests"
    last = go.call(PLUGIN_SERVICE, "Synchronize", api.SynchronizeRequest(pods=pods[1:], containers=ctrs[1:]),
                   api.SynchronizeResponse).decode(api.SynchronizeResponse)
    assert {u.container_id for u in last.update} == {"a1", "b1"}


def test_error_statuses_reach_gos_client_as_gos_server_gives_them(runtime: tuple[GoPeer, PluginProcess]) -> None:
    """The plugin's ttRPC server answers what Go's ttRPC server answers (test_go_server.py
    pins those): UNIMPLEMENTED "method M" / "service S", RESOURCE_EXHAUSTED for a message
    over 4 MiB; a payload the method cannot decode gets INTERNAL as from Go's generated
    service code. The connection stays usable after each."""
    go, _ = runtime
    go.event("RegisterPlugin")
    configure(go, request_timeout=20000)
    nomethod = go.call(PLUGIN_SERVICE, "NoSuchMethod", raw=b"")
    assert (nomethod.code, nomethod.message) == (Code.UNIMPLEMENTED, "method NoSuchMethod")
    noservice = go.call("no.such.v1.Service", "Configure", raw=b"")
    assert (noservice.code, noservice.message) == (Code.UNIMPLEMENTED, "service no.such.v1.Service")

    big = go.call(PLUGIN_SERVICE, "Configure", raw_size=MAX_MESSAGE)  # + the ttrpc.Request around it
    assert big.code == Code.RESOURCE_EXHAUSTED
    assert big.message.startswith("message length ") and big.message.endswith(
        f" exceed maximum message size of {MAX_MESSAGE}")

    bad = go.call(PLUGIN_SERVICE, "CreateContainer", raw=b"\x0a\xff")
    assert bad.code == Code.INTERNAL and bad.message.startswith("ttrpc: error unmarshalling payload: ")

    p = pod("p9", "burstable")
    assert go.call(PLUGIN_SERVICE, "RunPodSandbox", api.RunPodSandboxRequest(pod=p),
                   api.RunPodSandboxResponse).code == Code.OK


def test_the_runtime_closing_the_connection_makes_the_plugin_dial_again(
        runtime: tuple[GoPeer, PluginProcess]) -> None:
    go, plugin = runtime
    go.event("RegisterPlugin")
    configure(go, request_timeout=20000)
    assert go.send({"op": "close"})["ok"]
    # The Go side listens no more (a runtime that went away): the plugin logs the loss
    # and keeps dialling with back-off instead of exiting.
    for _ in range(600):  # bounded: the loss is logged first, the next dial's line after it
        if "reconnecting to NRI" in plugin.log():
            break
        time.sleep(0.05)
    assert "lost the NRI connection" in plugin.log() and "reconnecting to NRI" in plugin.log()
    assert plugin.proc is not None and plugin.proc.poll() is None


@pytest.mark.parametrize("ending", ["close", "Shutdown"])
def test_a_plugin_the_runtime_launches_on_a_handed_socket(go_binary: Path, workdir: Path, ending: str) -> None:
    """As NRI starts a pre-installed plugin: the socket as fd 3 and an environment of
    NRI_PLUGIN_SOCKET=3, NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and nothing else (no PATH). The
    plugin registers with that name and index, serves, and exits 0 when the runtime closes
    the socket or calls Shutdown."""
    plugin = PluginProcess(workdir, "/nonexistent/nri.sock", str(workdir / "host"))
    go = GoPeer(go_binary, ["-mode", "launch", "-plugin-name", "handed", "-plugin-idx", "42",
                            "-plugin-log", str(plugin.log_path), "--", *plugin.command()], workdir / "go.log")
    pid = 0
    try:
        pid = go.event("launched")["code"]
        reg = json_format.Parse(go.event("RegisterPlugin")["json"], api.RegisterPluginRequest())
        assert (reg.plugin_name, reg.plugin_idx) == ("handed", "42")
        configure(go, request_timeout=20000)
        p1, a1 = pod("p1", "burstable"), container("a1", "p1", milli_cpu=500)
        sync = go.call(PLUGIN_SERVICE, "Synchronize", api.SynchronizeRequest(pods=[p1], containers=[a1]),
                       api.SynchronizeResponse).decode(api.SynchronizeResponse)
        assert cpus_of(list(sync.update), "a1") == ONLINE
        if ending == "close":
            assert go.send({"op": "close"})["ok"]
        else:
            assert go.call(PLUGIN_SERVICE, "Shutdown", api.Empty(), api.Empty).code == Code.OK
        assert go.event("plugin-exited")["code"] == 0
        if ending == "close":
            assert "the runtime closed the connection it handed over: exiting" in plugin.log()
        else:
            assert "the runtime is shutting down" in plugin.log()
    except BaseException:
        print(plugin.log(), (workdir / "go.log").read_text(errors="replace"))
        raise
    finally:
        go.stop()
        kill_if_ours(pid)


def kill_if_ours(pid: int) -> None:
    """The launched plugin, if it outlived the test (checked by its command line: the pid
    may be another process's by now)."""
    with contextlib.suppress(OSError):
        if pid and b"cri_resmgr.nri.cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
