"""The topology-aware policy through the real relay process and the real containerd.

On this machine's own topology (2 CPUs: one pool) it gives the same real cgroup results
as static. On a generated multi-node sysfs tree (-host-root), the cpusets cannot exist
on 2 CPUs, so the relay runs with -dry-run: what it would send must be exactly what
the policy, built in-process on the same tree, decides for the same containers.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cgroupfs, sysfs
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
ALL = str(ONLINE)
RESERVED = str(CPUSet([ONLINE.min()]))
EXCLUSIVE = str(CPUSet([ONLINE.sorted()[1]])) if len(ONLINE) == 2 else None
TA = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 1\n"
PREFIX = "cri-resource-manager.intel.com/"


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-ta-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def besteffort(name, annotations=None):
    return PodSpec(name=name, annotations=annotations or {}, containers=[ContainerSpec(name="c")])


def burstable(name, cpu="500m", annotations=None, memory_limit=None):
    limits = {"memory": memory_limit} if memory_limit else {}
    return PodSpec(name=name, annotations=annotations or {},
                   containers=[ContainerSpec(name="c", requests={"cpu": cpu}, limits=limits)])


def guaranteed(name, cpu="1"):
    res = {"cpu": cpu, "memory": "32Mi"}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def wait_cpuset(k: Kubelet, cid: str, want: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = k.cgroup_files(cid).cpuset_cpus()
        allowed = cgroupfs.cpus_allowed_list(k.container_pid(cid))
        if CPUSet(got) == CPUSet(want) and CPUSet(allowed) == CPUSet(want):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"container {cid[:12]}: cpuset {got}, Cpus_allowed_list {allowed}, want {want}")
        time.sleep(0.1)


def wait_state(relay: RelayProcess, ok, timeout: float = 10.0) -> dict:
    path = Path(relay.state_dir) / "state.json"
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(path.read_text())
        if ok(state):
            return state
        if time.monotonic() > deadline:
            pytest.fail(f"state file never satisfied the check: {state}")
        time.sleep(0.05)


@pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
def test_same_cgroups_as_static_with_kill9_restarts(containerd, cgroup_root, workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text(TA)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        shared = k.start_pod(besteffort("ta-shared"))
        a = shared.container_ids["c"]
        wait_cpuset(k, a, ALL)
        excl = k.start_pod(guaranteed("ta-exclusive"))
        g = excl.container_ids["c"]
        wait_cpuset(k, g, EXCLUSIVE)
        wait_cpuset(k, a, RESERVED)  # the shared CPUs shrank to the reserved one

        relay.kill()
        relay.start()
        state = json.loads((Path(relay.state_dir) / "state.json").read_text())
        assert state["policy"] == "topology-aware"
        assert any(v["exclusive"] == EXCLUSIVE for v in state["assignments"].values())

        second = k.start_pod(guaranteed("ta-second"))  # no double booking: it runs shared
        g2 = second.container_ids["c"]
        wait_cpuset(k, g2, RESERVED)
        wait_cpuset(k, g, EXCLUSIVE)
        assert "ta-second" in relay.log() and "placed without what it asked for" in relay.log()

        relay.kill()
        relay.start()
        k.delete_pod(excl)
        wait_cpuset(k, a, ALL)
        wait_cpuset(k, g2, ALL)
        k.delete_pod(shared)
        k.delete_pod(second)
        wait_state(relay, lambda s: s["assignments"] == {} and s["containers"] == {})
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


WOULD = re.compile(r"would set default/([\w-]+):c: cpuset (\S*) mems (\S+)")


def test_host_root_multi_node_dry_run_sends_what_the_policy_decides(containerd, cgroup_root, workdir):
    host = workdir / "host"
    shape = dict(sockets=2, cores_per_die=4, threads_per_core=2, numa_per_socket=2, memory_only_nodes=2)
    sysfs.generate(host, **shape)
    cfg = workdir / "config.yaml"
    cfg.write_text(TA)
    dump = workdir / "dump.txt"
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-host-root", str(host), "-dry-run",
                          "-dump", "name:CreateContainer", "-dump-file", str(dump)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    pods = [("ta-be", besteffort("ta-be"), QoS.BESTEFFORT, 0, {}),
            ("ta-g2", guaranteed("ta-g2", "2"), QoS.GUARANTEED, 2000, {}),
            # A memory limit: a Burstable container without one gets every node's memory.
            ("ta-pmem", burstable("ta-pmem", annotations={PREFIX + "memory-type": "pmem"}, memory_limit="64Mi"),
             QoS.BURSTABLE, 500, {PREFIX + "memory-type": "pmem"}),
            ("ta-g6", guaranteed("ta-g6", "6"), QoS.GUARANTEED, 6000, {}),
            ("ta-wide", burstable("ta-wide", annotations={PREFIX + "unlimited-burstable": "true"}),
             QoS.BURSTABLE, 500, {PREFIX + "unlimited-burstable": "true"})]
    try:
        for _, spec, *_ in pods:
            h = k.start_pod(spec)
            # Dry-run: containerd got kubelet's request unchanged (all real CPUs).
            assert CPUSet(k.cgroup_files(h.container_ids["c"]).cpuset_cpus()) == ONLINE
        deadline = time.monotonic() + 10
        while len({m.group(1) for m in WOULD.finditer(relay.log())}) < len(pods):
            assert time.monotonic() < deadline, relay.log()
            time.sleep(0.1)
        log = relay.log()  # before the pods go: their release moves the others again
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
    last = {}
    for m in WOULD.finditer(log):
        last[m.group(1)] = (CPUSet.parse(m.group(2)), m.group(3))
    # The same decisions in-process, on the same tree.
    topology = discover(host)
    policy = TopologyAwarePolicy(build_context(topology, reserved=1))
    for name, _, qos, cpu, ann in pods:
        w = Workload(key=name, namespace="default", pod=name, name="c", qos=qos, cpu_request=cpu,
                     cpu_limit=cpu if qos is QoS.GUARANTEED else None, pod_annotations=ann,
                     memory_limit=64 << 20 if name == "ta-pmem" else None)
        policy.allocate(w)
    for name, *_ in pods:
        want = policy.resources(name)
        assert last[name] == (want.cpuset_cpus, want.cpuset_mems), name
    g2, g6 = last["ta-g2"][0], last["ta-g6"][0]
    assert len(g2) == 2 and len({topology.node_of(c) for c in g2}) == 1, "2 CPUs in one NUMA node"
    assert len(g6) == 6 and len({topology.package_of(c) for c in g6}) == 1, "6 CPUs in one package"
    assert last["ta-pmem"][1] in ("4", "5"), "memory-type pmem: the PMEM node"
    assert last["ta-wide"][0] == topology.online - g2 - g6, "the root pool: every CPU not exclusive"
    assert "dry-run: would set default/ta-g6:c" in dump.read_text()


def _reload(relay: RelayProcess, cfg: Path, text: str, marker: str) -> None:
    import signal
    seen = relay.log().count(marker)
    cfg.write_text(text)
    relay.signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while relay.log().count(marker) <= seen:
        assert time.monotonic() < deadline, relay.log()
        time.sleep(0.1)


@pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
def test_live_reconfiguration_moves_real_cpusets_or_is_refused(containerd, cgroup_root, workdir):
    first, second = ONLINE.sorted()
    cfg = workdir / "config.yaml"
    cfg.write_text(f"policy: {{Active: topology-aware, ReservedResources: {{CPU: 'cpuset:{first}'}}}}\n")
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        b = k.start_pod(burstable("ta-live-b")).container_ids["c"]
        g = k.start_pod(guaranteed("ta-live-g")).container_ids["c"]
        wait_cpuset(k, g, str(second))
        wait_cpuset(k, b, str(first))
        # The reserved CPU becomes the other one: the exclusive CPU must move, without draining.
        _reload(relay, cfg, f"policy: {{Active: topology-aware, ReservedResources: {{CPU: 'cpuset:{second}'}}}}\n",
                "SIGHUP: reloaded")
        wait_cpuset(k, g, str(first))
        wait_cpuset(k, b, str(second))
        # One CPU cannot hold an exclusive CPU and a shared container: refused, nothing changes.
        _reload(relay, cfg, f"policy: {{Active: topology-aware, AvailableResources: {{CPU: 'cpuset:{first}'}}}}\n",
                "SIGHUP: keeping the current configuration")
        assert "the running containers do not fit" in relay.log()
        time.sleep(0.5)
        wait_cpuset(k, g, str(first))
        wait_cpuset(k, b, str(second))
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
