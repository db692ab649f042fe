"""The whole engine (relay, interceptors, cache, policy, enforcement, config) on
generated large topologies, against an in-process CRI double."""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
import threading
from pathlib import Path

import grpc
import pytest
from fake_cri import FakeCRI

from cri_resmgr.config import EngineSettings, parse_document
from cri_resmgr.dump import Dumper
from cri_resmgr.engine.controller import Controller, EngineStats
from cri_resmgr.engine.cri import TransportFeed
from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.policy.registry import PolicyInfo, Registry, default_registry
from cri_resmgr.relay.runtime import CriRuntime
from cri_resmgr.topology.cpuset import CPUSet
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.grpcrelay import GrpcRelay
from cri_resmgr.transport.methods import MethodTable
from cri_resmgr.transport.upstream import Upstream
from tests.harness import sysfs
from tests.harness.kubelet import Kubelet, LinuxResources
from tests.harness.loop import LoopThread
from tests.harness.podspec import ContainerSpec, PodSpec

STATIC = "policy: {Active: static, ReservedResources: {CPU: 2}}\n"


class Engine:
    def __init__(self, shape: dict, config: str, registry: Registry | None = None, create_delay: float = 0.0,
                 cgroups=None, transport: str = "grpc", dry_run: bool = False):
        self.dry_run = dry_run  # -dry-run: decide and log, set nothing
        self.cgroups = cgroups  # the controller's real-cpuset reader (None: the default)
        self.transport = transport  # the relay's: "grpc" or "h2" (the frame relay)
        self.dir = Path(tempfile.mkdtemp(prefix="crirm-eng-", dir="/tmp"))
        sysfs.generate(self.dir / "host", **shape)
        self.loop = LoopThread()
        self.fake = FakeCRI(str(self.dir / "fake.sock"), create_delay)
        self.loop.run(self.fake.start())
        self.registry = registry or default_registry()
        self.relay_sock = str(self.dir / "relay.sock")
        self.start_relay(config)
        self.kubelet = Kubelet("unix://" + self.relay_sock, cgroup_root="/crirm-fake-nonexistent/kubepods")

    def start_relay(self, config: str) -> None:
        settings = EngineSettings(state_dir=str(self.dir / "state"), host_root=str(self.dir / "host"),
                                  dry_run=self.dry_run)

        async def start():
            up = Upstream(self.fake.socket_path)
            relay = GrpcRelay(self.relay_sock, up, up, MethodTable()) if self.transport == "grpc" \
                else FrameRelay(self.relay_sock, self.fake.socket_path, MethodTable())
            ctl = Controller(settings, self.registry, TransportFeed(relay), CriRuntime(up),
                             lambda specs, file, fmt, redact: Dumper(specs, file=file, fmt=fmt, redact=redact),
                             cgroups=self.cgroups)
            await ctl.apply(parse_document(config, "test config", self.registry.names()))
            await relay.start()
            return relay, ctl

        self.relay, self.ctl = self.loop.run(start())

    def flush(self) -> None:
        self.loop.run(self.ctl.flush())

    def close(self) -> None:
        self.kubelet.close()
        self.loop.run(self.relay.stop(1))
        self.loop.run(self.ctl.close())
        self.loop.run(self.fake.stop())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)




def guaranteed(name, cpu, mem="64Mi"):
    res = {"cpu": cpu, "memory": mem}
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests=res, limits=res)])


def burstable(name, cpu="500m"):
    return PodSpec(name=name, containers=[ContainerSpec(name="c", requests={"cpu": cpu})])


def besteffort(name):
    return PodSpec(name=name, containers=[ContainerSpec(name="c")])


def check_static_invariants(e: Engine, exclusive_names: set[str]) -> None:
    """Exclusive sets disjoint and outside the reserved set; every shared
    container runs on exactly (online - exclusive); the policy agrees."""
    e.flush()
    policy = e.ctl.active_policy()
    online = e.ctl.topology().online
    reserved = policy.reserved
    live = e.fake.live()
    exclusive: dict[str, CPUSet] = {}
    shared_sets = {}
    for c in live.values():
        pod_name = e.fake.pods[c["pod"]].metadata.name
        cpus = CPUSet(c["resources"].cpuset_cpus)
        if pod_name in exclusive_names:
            exclusive[pod_name] = cpus
        else:
            shared_sets[pod_name] = cpus
    taken = CPUSet()
    for name, cpus in exclusive.items():
        assert cpus, f"{name} has no CPUs"
        assert taken.isdisjoint(cpus), f"{name} shares exclusive CPUs: {cpus} vs taken {taken}"
        assert reserved.isdisjoint(cpus), f"{name} got reserved CPUs {cpus & reserved}"
        taken = taken | cpus
    want_shared = online - taken
    for name, cpus in shared_sets.items():
        assert cpus == want_shared, f"{name}: shared cpuset {cpus}, want {want_shared}"
    assert policy.shared == want_shared


def test_concurrent_creates_never_share_an_exclusive_cpu(engine_factory):
    e = engine_factory(dict(sockets=2, cores_per_die=16, threads_per_core=2, numa_per_socket=2), STATIC,
                       create_delay=0.05)
    e.kubelet.start_pod(besteffort("watcher"))
    names = {f"g{i}" for i in range(16)}
    errors = []

    def create(name):
        try:
            with Kubelet("unix://" + e.relay_sock, cgroup_root="/crirm-fake-nonexistent/kubepods") as k:
                k.start_pod(guaranteed(name, "3"))
        except Exception as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=create, args=(n,)) for n in sorted(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check_static_invariants(e, names)
    taken = CPUSet().union(*(CPUSet(c["resources"].cpuset_cpus) for c in e.fake.live().values()
                             if e.fake.pods[c["pod"]].metadata.name in names))
    assert len(taken) == 48


def test_random_create_remove_sequences_keep_invariants(engine_factory):
    e = engine_factory(dict(sockets=2, cores_per_die=32, threads_per_core=2, numa_per_socket=4,
                            numbering="interleaved"), STATIC)
    rng = random.Random(20261121)
    pods = {}  # name -> handle
    exclusive = set()
    for step in range(240):
        if pods and rng.random() < 0.4:
            name = rng.choice(sorted(pods))
            e.kubelet.delete_pod(pods.pop(name))
            exclusive.discard(name)
        else:
            name = f"p{step}"
            kind = rng.choice(["be", "bu", "gi", "gi", "gf"])
            if kind == "be":
                spec = besteffort(name)
            elif kind == "bu":
                spec = burstable(name)
            elif kind == "gi":
                spec = guaranteed(name, str(rng.randint(1, 6)))
            else:
                spec = guaranteed(name, "1500m")
            pods[name] = e.kubelet.start_pod(spec)
            if kind == "gi":
                exclusive.add(name)
        if step % 20 == 0:
            check_static_invariants(e, exclusive)
    check_static_invariants(e, exclusive)
    for name in sorted(pods):
        e.kubelet.delete_pod(pods.pop(name))
    e.flush()
    assert dict(e.ctl.active_policy().assignments()) == {}, "allocations leaked"
    assert e.ctl.active_policy().shared == e.ctl.topology().online


def test_failed_create_releases_its_allocation(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    watcher = e.kubelet.start_pod(besteffort("watcher"))
    e.fake.fail_names["c"] = grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.start_pod(guaranteed("doomed", "4"))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.value.details() == "fake: refusing to create c"  # the runtime's own error
    del e.fake.fail_names["c"]
    e.flush()
    assert not any(a.exclusive for a in e.ctl.active_policy().assignments().values())
    assert CPUSet(e.fake.cpuset(watcher.container_ids["c"])) == e.ctl.topology().online
    # The CPUs are really free: another container can have all 4 non-reserved... minus none.
    h = e.kubelet.start_pod(guaranteed("next", "4"))
    check_static_invariants(e, {"next"})
    assert len(CPUSet(e.fake.cpuset(h.container_ids["c"]))) == 4


def test_kubelet_update_keeps_policy_cpuset_and_passes_the_rest(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    h = e.kubelet.start_pod(guaranteed("g", "2"))
    cid = h.container_ids["c"]
    before = e.fake.cpuset(cid)
    # The same CPU size (a resize is tests/e2e/test_resize_containerd.py's), a new memory limit.
    e.kubelet.update_container_resources(cid, LinuxResources(cpu_shares=2048, cpu_quota=200000,
                                                             cpu_period=100000, memory_limit_in_bytes=64 << 20,
                                                             oom_score_adj=-997, cpuset_cpus="0-7"))
    res = e.fake.containers[cid]["resources"]
    assert res.cpu_shares == 2048 and res.cpu_quota == 200000 and res.memory_limit_in_bytes == 64 << 20
    assert res.cpuset_cpus == before != "0-7"


def test_a_pool_change_after_kubelets_update_resends_what_kubelet_set_last(engine_factory):
    # The engine keeps each container's resources message for the next pool change;
    # kubelet's own update must replace it, or the change would send the old memory limit.
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    spec = PodSpec(name="s", containers=[ContainerSpec(name="c", requests={"cpu": "500m"},
                                                        limits={"memory": "128Mi"})])
    sid = e.kubelet.start_pod(spec).container_ids["c"]
    e.kubelet.start_pod(guaranteed("g1", "1"))  # shrinks the pool: s updated from the kept message
    e.flush()
    assert e.fake.containers[sid]["resources"].memory_limit_in_bytes == 128 << 20
    e.kubelet.update_container_resources(sid, LinuxResources(cpu_shares=512, cpu_quota=0, cpu_period=100000,
                                                             memory_limit_in_bytes=64 << 20, oom_score_adj=999))
    e.kubelet.start_pod(guaranteed("g2", "1"))  # shrinks it again
    check_static_invariants(e, {"g1", "g2"})
    res = e.fake.containers[sid]["resources"]
    assert res.memory_limit_in_bytes == 64 << 20 and res.cpu_shares == 512
    saved = e.ctl._resmgr.cache.by_id(sid).resources  # what the next state save writes
    assert saved["memory_limit_in_bytes"] == str(64 << 20) and saved["cpuset_cpus"] == res.cpuset_cpus


class _Broken:
    def __init__(self, context):
        from cri_resmgr.policy import static
        self._inner = static.factory(context)

    def allocate(self, workload):
        raise RuntimeError(f"broken policy cannot place {workload}")

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _broken_registry() -> Registry:
    return Registry([*default_registry(), PolicyInfo("broken", "raises on every allocation", _Broken)])


def test_fail_open_forwards_unchanged_and_counts(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=2, threads_per_core=1),
                       "policy: {Active: broken}\n", registry=_broken_registry())
    h = e.kubelet.start_pod(guaranteed("victim", "1"))
    assert e.fake.cpuset(h.container_ids["c"]) == ""  # unchanged: kubelet sent no cpuset
    assert e.ctl.stats().policy_errors == 1


def test_fail_closed_returns_the_error(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=2, threads_per_core=1),
                       "policy: {Active: broken, FailClosed: true}\n", registry=_broken_registry())
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.start_pod(guaranteed("victim", "1"))
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "broken policy cannot place default/victim:c" in err.value.details()


def test_live_switch_and_rejected_config_keep_state(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    shared = e.kubelet.start_pod(besteffort("s"))
    g = e.kubelet.start_pod(guaranteed("g", "2"))
    check_static_invariants(e, {"g"})
    names = e.registry.names()

    async def apply(text):
        await e.ctl.apply(parse_document(text, "push", names))

    from cri_resmgr.config import ConfigError
    with pytest.raises(ConfigError, match="policy.Bogus: unknown key"):
        e.loop.run(apply("policy: {Active: static, Bogus: 1}\n"))
    with pytest.raises(ConfigError, match="ReservedResources.CPU"):
        e.loop.run(apply("policy: {Active: static, ReservedResources: {CPU: 99}}\n"))
    assert e.ctl.policy_name == "static"
    check_static_invariants(e, {"g"})  # nothing changed

    # More reserved CPUs: allocations are re-applied, still consistent.
    e.loop.run(apply("policy: {Active: static, ReservedResources: {CPU: 4}}\n"))
    check_static_invariants(e, {"g"})
    assert len(e.ctl.active_policy().reserved) == 4
    # Switch to none: containers get every CPU back; nothing is intercepted.
    e.loop.run(apply("policy: {Active: none}\n"))
    e.flush()
    online = e.ctl.topology().online
    assert CPUSet(e.fake.cpuset(g.container_ids["c"])) == online
    assert CPUSet(e.fake.cpuset(shared.container_ids["c"])) == online
    # And back to static: discovery finds the running containers and re-places them.
    e.loop.run(apply(STATIC))
    check_static_invariants(e, {"g"})
    assert len(CPUSet(e.fake.cpuset(g.container_ids["c"]))) == 2


def test_failed_updates_are_retried_and_never_fail_kubelets_call(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    watcher = e.kubelet.start_pod(besteffort("watcher"))
    e.fake.fail_updates = 2  # the shrink of the watcher's cpuset fails twice, then lands
    e.kubelet.start_pod(guaranteed("g", "2"))  # kubelet's call succeeds regardless
    check_static_invariants(e, {"g"})
    assert e.fake.fail_updates == 0 and e.ctl.stats().updates_sent >= 1
    assert len(CPUSet(e.fake.cpuset(watcher.container_ids["c"]))) == 6


def test_policy_switch_at_startup_reallocates_and_vanished_containers_are_dropped(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    keep = e.kubelet.start_pod(guaranteed("keep", "2"))
    gone = e.kubelet.start_pod(guaranteed("gone", "2"))
    shared = e.kubelet.start_pod(besteffort("s"))
    check_static_invariants(e, {"keep", "gone"})
    e.loop.run(e.relay.stop(1))
    e.loop.run(e.ctl.close())
    # While the relay is down, one pod disappears from the runtime.
    e.loop.run(_remove_pod_directly(e.fake, gone.sandbox_id))
    e.start_relay("policy: {Active: static-plus, ReservedResources: {CPU: 2}}\n")
    e.flush()
    assert e.ctl.policy_name == "static-plus"
    keys = set(e.ctl.active_policy().assignments())
    assert not any(k.startswith(gone.sandbox_id) for k in keys)  # vanished: released, not restored
    assert any(k.startswith(keep.sandbox_id) for k in keys)
    keep_cpus = CPUSet(e.fake.cpuset(keep.container_ids["c"]))
    shared_cpus = CPUSet(e.fake.cpuset(shared.container_ids["c"]))
    assert len(keep_cpus) == 2 and keep_cpus.isdisjoint(shared_cpus)
    assert shared_cpus == e.ctl.active_policy().shared  # re-placed by static-plus's pools
    assert keep_cpus.isdisjoint(e.ctl.active_policy().reserved)


async def _remove_pod_directly(fake, pod_id):
    fake.pods.pop(pod_id, None)
    for cid in [k for k, c in fake.containers.items() if c["pod"] == pod_id]:
        del fake.containers[cid]


def test_stats_is_a_snapshot_and_the_metrics_read_it(engine_factory):
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    e.kubelet.start_pod(besteffort("s"))
    e.kubelet.start_pod(guaranteed("g", "2"))
    e.flush()
    stats = e.ctl.stats()
    assert (stats.policy, stats.decisions, stats.containers, stats.policy_errors) == ("static", 2, 2, 0)
    assert stats.updates_sent >= 1 and stats.updates_failed == 0  # the shared container shrank
    assert stats.dump_dropped is None  # no dumper configured
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.decisions = 0
    e.kubelet.start_pod(besteffort("later"))
    assert stats.containers == 2 and e.ctl.stats().containers == 3  # taken then, not read through

    samples = {s.name: s.value for m in EngineCollector(e.ctl).collect() for s in m.samples}
    assert samples['cri_resmgr_policy_decisions_total'] == 3
    assert samples['cri_resmgr_containers'] == 3
    assert 'cri_resmgr_dump_dropped_total' not in samples


class _Feed:
    def reconfigure(self, **changes) -> None:
        raise AssertionError(f"nothing applied, yet reconfigured with {changes}")


def test_stats_before_any_configuration():
    ctl = Controller(EngineSettings(), default_registry(), _Feed(), None, lambda *args: None)
    assert ctl.stats() == EngineStats(policy="none", decisions=0, policy_errors=0, released_on_exit=0,
                                      exclusive_denied=0, updates_sent=0, updates_failed=0, containers=0,
                                      dump_dropped=None)
    assert ctl.active_policy() is None and ctl.config is None


def test_a_resize_the_runtime_refuses_leaves_the_old_size(engine_factory):
    # kubelet's resize reaches the runtime only after the policy decided; when the runtime
    # then fails it, the container keeps its old size and the others their CPUs.
    e = engine_factory(dict(sockets=1, cores_per_die=4, threads_per_core=2), STATIC)
    e.kubelet.start_pod(besteffort("be"))
    h = e.kubelet.start_pod(guaranteed("g", "1"))
    cid = h.container_ids["c"]
    check_static_invariants(e, {"g"})
    e.fake.fail_updates = 1
    with pytest.raises(grpc.RpcError) as err:
        e.kubelet.update_container_resources(cid, LinuxResources(cpu_shares=3072, cpu_quota=300000,
                                                                 cpu_period=100000, memory_limit_in_bytes=64 << 20,
                                                                 oom_score_adj=-997))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # the runtime's own error
    check_static_invariants(e, {"g"})
    key = next(k for k, a in e.ctl.active_policy().assignments().items() if a.exclusive)
    assert len(e.ctl.active_policy().assignment(key).exclusive) == 1
    assert len(CPUSet(e.fake.cpuset(cid))) == 1
    assert e.ctl.stats().resizes == 1  # the way back is not a resize of kubelet's

    e.kubelet.update_container_resources(cid, LinuxResources(cpu_shares=3072, cpu_quota=300000,
                                                             cpu_period=100000, memory_limit_in_bytes=64 << 20,
                                                             oom_score_adj=-997))
    check_static_invariants(e, {"g"})
    assert len(CPUSet(e.fake.cpuset(cid))) == 3
