"""The engine's periodic reconcile with the runtime, and the log lines an operator
reads: placements, releases, updates by name, denied exclusive CPUs."""

from __future__ import annotations

import logging

from test_engine_fake_runtime import STATIC, besteffort, check_static_invariants, guaranteed

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.topology.cpuset import CPUSet

SHAPE = dict(sockets=1, cores_per_die=4, threads_per_core=2)




def _messages(caplog, level=logging.INFO):
    return [r.getMessage() for r in caplog.records if r.name.startswith("cri_resmgr") and r.levelno == level]


def test_container_removed_behind_the_relays_back_releases_its_cpus(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    shared = e.kubelet.start_pod(besteffort("s"))
    g = e.kubelet.start_pod(guaranteed("g", "2"))
    check_static_invariants(e, {"g"})
    assert len(CPUSet(e.fake.cpuset(shared.container_ids["c"]))) == 6
    # crictl rm, straight at the runtime: the relay never sees it.
    del e.fake.containers[g.container_ids["c"]]
    assert e.loop.run(e.ctl.reconcile()) == {"gone": 1, "adopted": 0, "resent": 0}
    e.flush()
    assert CPUSet(e.fake.cpuset(shared.container_ids["c"])) == e.ctl.topology().online  # the pool grew back
    assert not any(k.startswith(g.sandbox_id) for k in e.ctl.active_policy().assignments())
    # Nothing changed since: one ListContainers, nothing else.
    assert e.loop.run(e.ctl.reconcile()) == {"gone": 0, "adopted": 0, "resent": 0}


def test_unknown_running_container_is_adopted_as_at_start_up(engine_factory):
    e = engine_factory(SHAPE, STATIC)
    shared = e.kubelet.start_pod(besteffort("s"))
    e.flush()
    # A pod and container made at the runtime directly (another client of containerd).
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="stray", namespace="default", uid="u1"))
    e.fake.pods["podstray"] = cfg
    e.fake.containers["ctrstray"] = {
        "pod": "podstray", "name": "c", "metadata": pb.ContainerMetadata(name="c"),
        "state": pb.ContainerState.CONTAINER_RUNNING, "resources": pb.LinuxContainerResources()}
    assert e.loop.run(e.ctl.reconcile()) == {"gone": 0, "adopted": 1, "resent": 0}
    e.flush()
    assert "podstray:c:0" in e.ctl.active_policy().assignments()
    assert e.fake.cpuset("ctrstray") == e.fake.cpuset(shared.container_ids["c"])  # placed on the shared pool
    assert e.loop.run(e.ctl.reconcile()) == {"gone": 0, "adopted": 0, "resent": 0}  # known now


def test_placements_releases_and_updates_are_logged_with_names(engine_factory, caplog):
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e = engine_factory(SHAPE, STATIC)
    e.kubelet.start_pod(besteffort("web"))
    g = e.kubelet.start_pod(guaranteed("db", "2"))
    e.flush()
    info = _messages(caplog)
    assert any(m.startswith("default/web:c: shared CPUs ") for m in info), info
    excl = [m for m in info if m.startswith("default/db:c: exclusive CPUs ")]
    assert len(excl) == 1 and ", mems 0" in excl[0], info
    # The shrink of web's cpuset is an update sent to another container: named, with its cause.
    assert any(m.startswith("updating 1 container after creating default/db:c: cpuset ")
               and m.endswith(" mems 0 for default/web:c") for m in info), info
    e.kubelet.delete_pod(g)
    e.flush()
    info = _messages(caplog)
    assert any(m.startswith("default/db:c: released exclusive CPUs") for m in info), info


def test_a_decision_that_updates_many_containers_is_one_info_line_naming_a_few(engine_factory, caplog):
    caplog.set_level(logging.DEBUG, logger="cri_resmgr")
    e = engine_factory(SHAPE, STATIC)
    first = e.kubelet.start_pod(besteffort("s0"))
    for i in range(1, 6):
        e.kubelet.start_pod(besteffort(f"s{i}"))
    e.flush()
    caplog.clear()
    g = e.kubelet.start_pod(guaranteed("db", "2"))
    e.flush()
    shared = e.fake.cpuset(first.container_ids["c"])
    info = [m for m in _messages(caplog) if m.startswith("updat")]
    assert len(info) == 1, info
    assert info[0].startswith("updating 6 containers after creating default/db:c: cpuset "), info
    named = info[0].split(" mems 0 for ")[1]
    assert named.endswith(" and 3 more"), info
    assert len(set(named[:-len(" and 3 more")].split(", ")) & {f"default/s{i}:c" for i in range(6)}) == 3, info
    assert f"cpuset {shared} " in info[0], (shared, info)
    # Each container's update, by name, at DEBUG only.
    debug = _messages(caplog, logging.DEBUG)
    assert sorted(m.split(" (")[0] for m in debug if m.startswith("updated ")) == \
        [f"updated default/s{i}:c" for i in range(6)], debug
    caplog.clear()
    e.kubelet.delete_pod(g)
    e.flush()
    info = [m for m in _messages(caplog) if m.startswith("updat")]
    assert len(info) == 1 and info[0].startswith("updating 6 containers after stopping default/db:c: "), info


def test_guaranteed_container_without_its_exclusive_cpus_is_a_warning_and_counted(engine_factory, caplog):
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e = engine_factory(SHAPE, STATIC)  # 8 CPUs, 2 reserved: 5 can be exclusive
    e.kubelet.start_pod(guaranteed("big", "5"))
    e.kubelet.start_pod(guaranteed("late", "2"))
    e.flush()
    warnings = _messages(caplog, logging.WARNING)
    assert any(m.startswith("default/late:c placed without what it asked for") for m in warnings), \
        warnings
    assert e.ctl.stats().exclusive_denied == 1
    samples = {s.name: s.value for m in EngineCollector(e.ctl).collect() for s in m.samples}
    assert samples["cri_resmgr_requests_not_met_total"] == 1
    assert samples["cri_resmgr_exclusive_cpus_denied_total"] == 1  # the deprecated name


def test_at_a_restart_saved_containers_are_restored_and_new_ones_adopted(engine_factory, caplog):
    """Issue 29: every container found at start-up was logged "restored", also those the relay
    had never seen (started while it was down): those are "adopted"."""
    e = engine_factory(SHAPE, STATIC)
    e.kubelet.start_pod(besteffort("known"))
    e.flush()
    e.loop.run(e.relay.stop(1))
    e.loop.run(e.ctl.close())
    cfg = pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="newcomer", namespace="default", uid="u2"))
    e.fake.pods["podnew"] = cfg
    e.fake.containers["ctrnew"] = {
        "pod": "podnew", "name": "c", "metadata": pb.ContainerMetadata(name="c"),
        "state": pb.ContainerState.CONTAINER_RUNNING, "resources": pb.LinuxContainerResources()}
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e.start_relay(STATIC)
    lines = _messages(caplog)
    assert any(m.startswith("restored default/known:c") for m in lines), lines
    assert any(m.startswith("adopted default/newcomer:c") for m in lines), lines
    assert not any(m.startswith("restored default/newcomer:c") for m in lines), lines
    assert any("1 known from the saved state, 1 adopted (not in the saved state)" in m for m in lines), lines


def test_a_live_policy_switch_says_re_placed_not_adopted(engine_factory, caplog):
    """Issue 38: a live switch logged every container "adopted" (new to the relay), though the
    relay knew each; and a denial as "when its allocation was restored", though none was."""
    from cri_resmgr.config.schema import parse_document

    e = engine_factory(SHAPE, STATIC)
    e.kubelet.start_pod(guaranteed("g", "2"))
    e.kubelet.start_pod(besteffort("s"))
    e.flush()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e.loop.run(e.ctl.apply(parse_document("policy: {Active: static-plus}\n", "push", e.registry.names())))
    lines = _messages(caplog)
    assert any(m.startswith("re-placed default/g:c") for m in lines), lines
    assert any(m.startswith("re-placed default/s:c") for m in lines), lines
    assert not any(m.startswith(("adopted ", "restored ")) for m in lines), lines
    assert not any("when its allocation was restored" in m for m in _messages(caplog, logging.WARNING))


def test_dry_run_says_would_set_once_per_container_and_cpuset(engine_factory, caplog):
    """Issue 38: with -dry-run nothing is applied, so each later update batch naming a container
    (another one's creation shrinking the shared pool, a reconcile) said its "would set" again."""
    e = engine_factory(SHAPE, STATIC, dry_run=True)
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e.kubelet.start_pod(besteffort("s"))
    e.kubelet.start_pod(besteffort("t"))
    e.kubelet.start_pod(guaranteed("g", "2"))
    e.flush()
    e.loop.run(e.ctl.reconcile())
    said = [m for m in _messages(caplog) if m.startswith("dry-run: would set")]
    assert len(said) == len(set(said)), said
    # Each shared container is told once of the pool before g and once of the pool after.
    assert sum(m.startswith("dry-run: would set default/s:c") for m in said) == 2, said
    assert sum(m.startswith("dry-run: would set default/g:c") for m in said) == 1, said
