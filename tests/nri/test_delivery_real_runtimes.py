"""How the plugin's updates of other containers reach real containerd (issue 34 B and 4),
checked in the real cgroup files and /proc/PID/status. This machine has 2 CPUs: the
static policy reserves 1 and gives 1 exclusive.

B: a shared container whose start is in flight when a Guaranteed one takes the
exclusive CPU. containerd applies the shrink to its spec only (its task was made from
the old one): the plugin sends it again once the container has started. The session
containerd's gated runtime handler holds the `runc start`, so the update lands in that
window every time, not by luck.

4: lifecycle events and unsolicited updates together for a while (the reconcile sends
the updates: cpusets drifted by hand in the cgroup files; under such churn most go in the
next hook's reply, the rest with UpdateContainers): no call of the runtime's to the
plugin and no UpdateContainers of the plugin's stalls past the runtime's timeout,
the runtime never closes the plugin's connection, and it still answers at the end.
`CRI_RESMGR_NRI_SOAK_SECONDS` makes it run longer than its default 40 s.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cgroupfs
from tests.harness.containerd import GATED_RUNTIME, Containerd
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.nri.plugin_process import STATIC, PluginProcess
from tests.nri.test_real_runtimes import (
    ALL,
    EXCLUSIVE,
    ONLINE,
    RESERVED,
    besteffort,
    free_port,
    guaranteed,
    wait_cpuset,
    wait_for,
)

pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenarios are written for the 2-CPU machines")
SOAK_SECONDS = float(os.environ.get("CRI_RESMGR_NRI_SOAK_SECONDS", "40"))


def _kubelet(ctd: Containerd) -> Iterator[Kubelet]:
    k = Kubelet(ctd.address, cgroup_root=f"{ctd.owned_cgroup_roots[0]}/kubepods")
    try:
        yield k
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()


@pytest.fixture
def kubelet_on(nri_containerd: Containerd) -> Iterator[Kubelet]:
    yield from _kubelet(nri_containerd)


@pytest.fixture
def kubelet_2(containerd_2: Containerd) -> Iterator[Kubelet]:
    yield from _kubelet(containerd_2)


def test_an_update_racing_a_shared_containers_start_reaches_its_cgroup(nri_containerd, kubelet_on, workdir):
    k, ctd = kubelet_on, nri_containerd
    plugin = PluginProcess(workdir, str(ctd.layout.nri_socket), "/", STATIC).start()  # no reconcile
    try:
        _synchronized(plugin)
        shared = PodSpec(name="race-be", containers=[ContainerSpec(name="c")], runtime_handler=GATED_RUNTIME)
        sandbox = k.run_pod(shared)
        a = k.create_container(shared, sandbox, "c")
        ctd.hold_start(a)
        failure: list[BaseException] = []

        def start() -> None:
            try:
                k.start_container(a)
            except BaseException as e:  # reported below
                failure.append(e)

        t = threading.Thread(target=start, name="held-start")
        t.start()
        try:
            ctd.wait_held(a)  # its task is made, from a spec with every CPU
            g = k.start_pod(guaranteed("race-g")).container_ids["c"]
        finally:
            ctd.release_start(a)
            t.join(30)
        assert not t.is_alive() and not failure, failure
        wait_cpuset(k, g, EXCLUSIVE, log=plugin.log)
        wait_cpuset(k, a, RESERVED, log=plugin.log)  # not left on the exclusive CPU
        assert "sending it now that it has started" in plugin.log()
    finally:
        plugin.stop()


def test_pods_started_together_leave_no_shared_container_on_the_exclusive_cpu(nri_containerd, kubelet_on, workdir):
    """As kubelet starts two pods at once (its creates a few ms apart): no gate, so where
    the update lands differs from pair to pair; each pair must end placed right."""
    k, ctd = kubelet_on, nri_containerd
    plugin = PluginProcess(workdir, str(ctd.layout.nri_socket), "/", STATIC).start()  # no reconcile
    try:
        _synchronized(plugin)
        def start(name: str, spec: PodSpec, started: dict[str, str], failure: list[BaseException]) -> None:
            try:
                started[name] = k.start_pod(spec).sandbox_id
            except BaseException as e:  # reported below
                failure.append(e)

        for i in range(4):
            started: dict[str, str] = {}
            failure: list[BaseException] = []
            threads = [threading.Thread(target=start, args=("be", besteffort(f"pair-be-{i}"), started, failure)),
                       threading.Thread(target=start, args=("g", guaranteed(f"pair-g-{i}"), started, failure))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert not failure, failure
            be, g = (k.list_containers(sandbox_id=started[n])[0].id for n in ("be", "g"))
            wait_cpuset(k, g, EXCLUSIVE, log=plugin.log)
            wait_cpuset(k, be, RESERVED, log=plugin.log)
            for n in ("be", "g"):
                k.delete_pod(started[n])
    finally:
        plugin.stop()


def _synchronized(plugin: PluginProcess) -> int:
    """Waits for a session of the plugin's that got its Synchronize: under load the runtime
    may drop the first one (the policy not yet active within its registration timeout) and
    the plugin registers again, and a container created meanwhile reaches the plugin only in
    the next Synchronize, not as a CreateContainer. Where the log stood then."""
    wait_for("the plugin's Synchronize", lambda: "nri.app: synchronized:" in plugin.log(), plugin.log, timeout=120)
    return len(plugin.log())


def _drift(k: Kubelet, cid: str) -> None:
    """The container's cgroup cpuset set by hand to what the policy did not give it."""
    files = cgroupfs.cgroup_files_of_pid(k.container_pid(cid))
    now = CPUSet.parse(files.cpuset_cpus())
    (files.dirs["cpuset"] / "cpuset.cpus").write_text(RESERVED if now == ONLINE else ALL)


def _scrape(port: int) -> str:
    return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode())


def _metric_buckets(text: str) -> dict[str, tuple[float, float]]:
    """Per method of the plugin's calls: (observations up to 2.5 s, all observations)."""
    upto: dict[str, float] = {}
    total: dict[str, float] = {}
    for m in re.finditer(r'^cri_resmgr_relay_call_duration_seconds_bucket\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels["le"] == "2.5":
            upto[labels["method"]] = float(m.group(2))
        elif labels["le"] == "+Inf":
            total[labels["method"]] = float(m.group(2))
    return {method: (upto.get(method, 0.0), n) for method, n in total.items()}


def test_lifecycle_and_unsolicited_updates_together_stall_nothing(containerd_2, kubelet_2, workdir):
    k, ctd = kubelet_2, containerd_2
    port = free_port()
    # The reconcile every second (PluginProcess turns it off: the later flag wins).
    plugin = PluginProcess(workdir, str(ctd.layout.nri_socket), "/", STATIC,
                           args=("-metrics-address", f"127.0.0.1:{port}", "-reconcile-period", "1")).start()
    ctd_log = ctd.layout.log
    ctd_log_start = ctd_log.stat().st_size if ctd_log.exists() else 0
    stop = threading.Event()
    errors: list[str] = []
    cycles = [0]
    drifted = [0]
    try:
        since = _synchronized(plugin)
        sessions = plugin.log().count("registered with the runtime")
        ctd_log_start = ctd_log.stat().st_size if ctd_log.exists() else 0
        before = _metric_buckets(_scrape(port))
        steady = k.start_pod(besteffort("soak-steady")).container_ids["c"]
        clients = [Kubelet(ctd.address, cgroup_root=k.cgroup_root) for _ in range(3)]

        def lifecycle(w: int, client: Kubelet) -> None:
            i = 0
            while not stop.is_set():
                spec = guaranteed(f"soak-g{w}-{i}") if (w + i) % 2 else besteffort(f"soak-b{w}-{i}")
                try:
                    pod = client.start_pod(spec)
                    client.delete_pod(pod)
                    cycles[0] += 1
                except Exception as e:  # every failure is reported, the loop goes on
                    errors.append(f"worker {w} cycle {i}: {type(e).__name__}: {e}")
                i += 1

        def drift() -> None:
            while not stop.wait(0.3):
                try:
                    _drift(k, steady)
                    drifted[0] += 1
                except OSError as e:  # a cgroup write the kernel refused: not what is tested
                    errors.append(f"drift: {e}")

        threads = [threading.Thread(target=lifecycle, args=(w, c), name=f"soak-{w}") for w, c in enumerate(clients)]
        threads.append(threading.Thread(target=drift, name="soak-drift"))
        for t in threads:
            t.start()
        try:
            stop.wait(SOAK_SECONDS)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
            for c in clients:
                c.close()
        def diagnosis() -> str:
            with open(ctd_log, errors="replace") as f:
                f.seek(ctd_log_start)
                theirs = [x for x in f if "nri" in x.lower() or "level=error" in x]
            return f"plugin log:\n{plugin.log()[-6000:]}\ncontainerd's NRI lines:\n{''.join(theirs[-60:])}"

        assert not any(t.is_alive() for t in threads), f"a worker is stuck: the runtime stopped answering; {diagnosis()}"
        assert errors == [], f"{errors[:5]}; {diagnosis()}"
        assert cycles[0] >= 3 and drifted[0] >= 3, (cycles, drifted)

        # The runtime still answers, and the plugin still places what it creates.
        g = k.start_pod(guaranteed("soak-after")).container_ids["c"]
        wait_cpuset(k, g, EXCLUSIVE, log=plugin.log)
        wait_cpuset(k, steady, RESERVED, log=plugin.log)

        log = plugin.log()[since:]  # the soak's: a session dropped before it is no stall
        buckets = {m: (upto - before.get(m, (0.0, 0.0))[0], n - before.get(m, (0.0, 0.0))[1])
                   for m, (upto, n) in _metric_buckets(_scrape(port)).items()}  # the soak's calls
        print(f"soak: {SOAK_SECONDS:g}s, {cycles[0]} pod cycles, {drifted[0]} drifts; calls (<=2.5s, all): {buckets}")
        # The reconcile put the drifted cpuset back, in hooks' replies or with UpdateContainers.
        resent = log.count("sending its cpuset again")
        print(f"soak: the reconcile resent {resent} times; UpdateContainers calls: "
              f"{buckets.get('UpdateContainers', (0, 0))[1]:g}")
        assert resent >= 3, log[-4000:]
        slow = {m: (upto, n) for m, (upto, n) in buckets.items() if upto != n}
        assert slow == {}, f"calls over 2.5 s: {slow}"
        for line in ("more than the runtime's request timeout", "no decision within", "did not finish within",
                     "lost the NRI connection"):
            assert line not in log, f"{line!r} in the plugin's log:\n{log[-4000:]}"
        # The runtime may refuse an update of a container it is removing meanwhile
        # ("NRI update of some containers failed"); a call it did not answer is a stall.
        unanswered = [x for x in log.splitlines() if "UpdateContainers of" in x
                      and re.search(r"DEADLINE_EXCEEDED|UNAVAILABLE", x)]
        assert unanswered == [], unanswered
        assert plugin.log().count("registered with the runtime") == sessions  # the runtime never dropped it
        with open(ctd_log, errors="replace") as f:
            f.seek(ctd_log_start)
            theirs = [x for x in f if "cri-resmgr" in x and re.search(r"timeout|deadline|closed|failed", x, re.I)]
        assert theirs == [], theirs[:10]
    finally:
        stop.set()
        plugin.stop()
