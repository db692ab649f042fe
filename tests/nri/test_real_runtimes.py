"""The plugin on real runtimes: containerd 1.7.24 (NRI v0.6) and 2.1.9, NRI enabled,
one instance of each per session (tests/nri/conftest.py), checked in the real cgroup
files and /proc/PID/status. This machine has 2 CPUs: reserve 1, give 1 exclusive.

Launched: the plugin pre-installed in the runtime's plugin directory with its
configuration in the plugin config directory, started by the runtime at its own start
(a restart of the session's instance). External: the plugin dials the NRI socket.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cgroupfs
from tests.harness.containerd import Containerd
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, LinuxResources, PodSpec
from tests.harness.relayproc import RelayProcess
from tests.nri.plugin_process import STATIC, PluginProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenarios are written for the 2-CPU machines")
ALL = str(ONLINE)
RESERVED = str(CPUSet([ONLINE.min()]))
EXCLUSIVE = str(CPUSet([ONLINE.sorted()[-1]]))
PLUGIN = "90-cri-resmgr"  # IDX-NAME: how a runtime names a plugin in its plugin directory


def besteffort(name: str) -> PodSpec:
    return PodSpec(name=name, containers=[ContainerSpec(name="c")])


def guaranteed(name: str, cpu: str = "1") -> PodSpec:
    res = {"cpu": cpu, "memory": "32Mi"}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def wait_cpuset(k: Kubelet, cid: str, want: str, timeout: float = 20.0,
                log: Callable[[], str] = str) -> None:
    """The cgroup's cpuset and the process's Cpus_allowed_list both; unsolicited
    updates are asynchronous, so bounded waiting."""
    deadline = time.monotonic() + timeout
    while True:
        got = k.cgroup_files(cid).cpuset_cpus()
        allowed = cgroupfs.cpus_allowed_list(k.container_pid(cid))
        if CPUSet(got) == CPUSet(want) and CPUSet(allowed) == CPUSet(want):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"container {cid[:12]}: cpuset {got}, Cpus_allowed_list {allowed}, want {want}; "
                        f"plugin log:\n{log()[-4000:]}")
        time.sleep(0.1)


def wait_for(what: str, ok: Callable[[], bool], log: Callable[[], str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout}s; log:\n{log()[-4000:]}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="crirm-nrp-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kubelet_on(nri_containerd: Containerd) -> Iterator[Kubelet]:
    k = Kubelet(nri_containerd.address, cgroup_root=f"{nri_containerd.owned_cgroup_roots[0]}/kubepods")
    try:
        yield k
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()


class Launched:
    """The plugin pre-installed in the runtime's plugin directory: a wrapper that
    records its PID and runs `cri-resmgr-nri` with the configuration the runtime
    reads from its plugin config directory (ConfigureRequest.config)."""

    def __init__(self, ctd: Containerd, work: Path, config: str, args: tuple[str, ...] = ()):
        self.ctd, self.work = ctd, work
        self.pid_file = work / "launched.pid"
        self.log_path = work / "launched.log"
        self.state_dir = work / "state"
        self.exe = ctd.layout.nri_plugins / PLUGIN
        self.conf = ctd.layout.nri_conf / f"{PLUGIN}.conf"
        command = [sys.executable, "-m", "cri_resmgr.nri.cli", "-state-dir", str(self.state_dir),
                   "-host-root", "/", "-config-socket", "-", "-reconcile-period", "0", *args]
        self.exe.write_text("#!/bin/sh\necho $$ > {}\nexec {} >> {} 2>&1\n".format(
            self.pid_file, " ".join(command), self.log_path))
        self.exe.chmod(0o755)
        self.conf.write_text(config)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        pid = self.pid
        return pid is not None and Path(f"/proc/{pid}").exists() and \
            "cri_resmgr.nri.cli" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")

    def kill(self) -> None:
        pid = self.pid
        if pid is not None and self.alive():
            os.kill(pid, signal.SIGKILL)
            wait_for("the launched plugin's exit", lambda: not self.alive(), self.log, 10)

    def uninstall(self) -> None:
        """Out of the plugin directory, and stopped: the runtime launches it no more."""
        self.exe.unlink(missing_ok=True)
        self.conf.unlink(missing_ok=True)
        self.kill()


@pytest.fixture
def launched(nri_containerd: Containerd, plugin_dir: Path) -> Iterator[Callable[..., Launched]]:
    """Installs the plugin and restarts the runtime, which launches it; afterwards the
    plugin is uninstalled and the runtime restarted without it."""
    made: list[Launched] = []

    def install(config: str = STATIC, args: tuple[str, ...] = ()) -> Launched:
        p = Launched(nri_containerd, plugin_dir, config, args)
        made.append(p)
        nri_containerd.restart()
        return p

    yield install
    for p in made:
        p.uninstall()
    if made:
        nri_containerd.restart()


def test_launched_plugin_activates_at_configure_and_gives_an_exclusive_cpu(nri_containerd, kubelet_on, launched):
    """containerd 1.7 never sends Synchronize to a plugin it launched (NRI before v0.7):
    the configuration from the plugin config directory is in force from Configure."""
    k = kubelet_on
    shared = k.start_pod(besteffort("l-shared"))  # before the plugin: learned later
    a = shared.container_ids["c"]
    plugin = launched()
    wait_for("the launched plugin's policy", lambda: "policy static active" in plugin.log(), plugin.log)
    assert "ConfigureRequest.config" in plugin.log() or "the runtime's configuration" in plugin.log()

    g = k.start_pod(guaranteed("l-excl")).container_ids["c"]
    wait_cpuset(k, g, EXCLUSIVE)
    if nri_containerd.major == 1:
        # No Synchronize: the container from before the plugin is unknown to it (said
        # once in its log) until an event names it; then it is adopted and shrinks.
        wait_for("the note on the missing Synchronize", lambda: "no Synchronize from" in plugin.log(), plugin.log)
        assert plugin.log().count("no Synchronize from") == 1
        assert CPUSet(k.cgroup_files(a).cpuset_cpus()) == ONLINE
        k.update_container_resources(a, LinuxResources(cpu_shares=2, cpu_quota=0, cpu_period=100000,
                                                       memory_limit_in_bytes=0, oom_score_adj=0))
    wait_cpuset(k, a, RESERVED, log=plugin.log)  # adopted: at Synchronize (2.x) or from the event (1.7)
    b = k.start_pod(besteffort("l-after")).container_ids["c"]
    wait_cpuset(k, b, RESERVED)

    # Killed: neither runtime launches it again; containers are still created (fail-open).
    plugin.kill()
    time.sleep(1)
    assert not plugin.alive()
    late = k.start_pod(besteffort("l-failopen")).container_ids["c"]
    assert CPUSet(k.cgroup_files(late).cpuset_cpus()) == ONLINE  # no policy decided: the runtime's default
    wait_cpuset(k, g, EXCLUSIVE)  # nothing moved while it is away

    # The operator's remedy after a crash: restart the runtime, which launches it again;
    # the saved state keeps the exclusive CPU where it was.
    nri_containerd.restart()
    wait_for("the relaunched plugin", lambda: plugin.log().count("policy static active") >= 2, plugin.log)
    second = k.start_pod(guaranteed("l-second")).container_ids["c"]
    wait_cpuset(k, second, RESERVED)  # no double booking: the one exclusive CPU is taken
    wait_cpuset(k, g, EXCLUSIVE)


def test_external_plugin_kill_restart_and_state_lock(nri_containerd, kubelet_on, plugin_dir):
    k = kubelet_on
    port = free_port()
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), "/", STATIC,
                           args=("-metrics-address", f"127.0.0.1:{port}")).start()
    try:
        wait_for("the external plugin's policy", lambda: "policy static active" in plugin.log(), plugin.log)
        # What the DaemonSet's probes and a Prometheus ask (scripts/node/cri-resmgr-nri-daemonset.yaml).
        wait_for("/readyz", lambda: http_status(f"http://127.0.0.1:{port}/readyz") == 200, plugin.log)
        assert http_status(f"http://127.0.0.1:{port}/healthz") == 200
        assert http_status(f"http://127.0.0.1:{port}/metrics") == 200
        a = k.start_pod(besteffort("e-shared")).container_ids["c"]
        g = k.start_pod(guaranteed("e-excl")).container_ids["c"]
        wait_cpuset(k, g, EXCLUSIVE)
        wait_cpuset(k, a, RESERVED)

        # The state directory is the plugin's: a relay on it refuses to start.
        relay = RelayProcess(plugin_dir / "relay", str(nri_containerd.socket),
                             ["-state-dir", plugin.state_dir, "-metrics-address", ""])
        with pytest.raises(RuntimeError, match="in use"):
            relay.start(timeout=20)

        # SIGKILL: fail-open meanwhile, then a restart moves and double-books nothing.
        assert plugin.proc is not None
        plugin.proc.kill()
        plugin.proc.wait(10)
        b = k.start_pod(besteffort("e-away")).container_ids["c"]
        assert CPUSet(k.cgroup_files(b).cpuset_cpus()) == ONLINE  # fail-open: created, undecided
        plugin.start()
        wait_for("the restarted plugin", lambda: plugin.log().count("policy static active") >= 2, plugin.log)
        wait_cpuset(k, g, EXCLUSIVE)
        wait_cpuset(k, b, RESERVED)  # created while it was away: adopted at Synchronize
        g2 = k.start_pod(guaranteed("e-second")).container_ids["c"]
        wait_cpuset(k, g2, RESERVED)
        state = json.loads((Path(plugin.state_dir) / "state.json").read_text())
        assert sum(1 for v in state["assignments"].values() if v["exclusive"]) == 1

        # The runtime restarts: the plugin re-dials, is configured and synchronized again.
        registered = plugin.log().count("registered with the runtime")
        nri_containerd.restart()
        wait_for("re-registration", lambda: plugin.log().count("registered with the runtime") > registered,
                 plugin.log)
        wait_for("the new session's Synchronize", lambda: plugin.log().count("gone meanwhile") >= 3, plugin.log)
        c = k.start_pod(besteffort("e-after-restart")).container_ids["c"]
        wait_cpuset(k, c, RESERVED, log=plugin.log)
        wait_cpuset(k, g, EXCLUSIVE)
    finally:
        plugin.stop()


TOPOLOGY_AWARE = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 1\n"
BALLOONS = ("policy:\n  Active: balloons\n  ReservedResources:\n    CPU: 1\n  balloons:\n    BalloonTypes:\n"
            "      - Name: alpha\n        Namespaces: [default]\n        MaxBalloons: 1\n        MinCPUs: 1\n"
            "        MaxCPUs: 1\n")


@pytest.mark.parametrize("policy", ["topology-aware", "balloons"])
def test_other_policies_place_a_container(nri_containerd, kubelet_on, plugin_dir, policy):
    k = kubelet_on
    config = TOPOLOGY_AWARE if policy == "topology-aware" else BALLOONS
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), "/", config).start()
    try:
        wait_for(f"policy {policy}", lambda: f"policy {policy} active" in plugin.log(), plugin.log)
        g = k.start_pod(guaranteed(f"{policy}-g")).container_ids["c"]
        if policy == "topology-aware":
            wait_cpuset(k, g, EXCLUSIVE)
            return
        state_file = Path(plugin.state_dir) / "state.json"
        wait_for("the balloon in the state file", lambda: state_file.exists() and any(
            v.get("details", {}).get("balloon") == "alpha[0]"
            for v in json.loads(state_file.read_text())["assignments"].values()), plugin.log)
        cpus = next(v["details"]["cpus"] for v in json.loads(state_file.read_text())["assignments"].values())
        assert len(CPUSet.parse(cpus)) == 1
        wait_cpuset(k, g, cpus)
    finally:
        plugin.stop()
