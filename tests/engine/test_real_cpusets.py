"""Updates that race a start (issue 28.4), below the real-containerd test
(tests/e2e/test_start_race_containerd.py): the enforcer's re-send after a start,
the reading of a container's real cpuset from its cgroup, and the reconcile that
sends the policy's cpuset again where the cgroup holds another."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from test_engine_fake_runtime import STATIC, Engine, besteffort, guaranteed

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.enforce import Enforcer
from cri_resmgr.engine.realcpuset import CgroupReader, RealCpuset
from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.topology.cpuset import CPUSet

CID = "c0ffee" * 10 + "abcd"


# -- the enforcer: updates that race a start are sent again --------------------------


class _Runtime:
    """A runtime port whose `update` waits for `gate` while it is set (the enforcer uses no other call)."""

    path = "fake"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def update(self, container_id, resources, timeout=10.0):
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append((container_id, resources.cpuset_cpus))


def _res(cpus: str) -> pb.LinuxContainerResources:
    return pb.LinuxContainerResources(cpuset_cpus=cpus)


def test_update_sent_during_a_start_is_sent_again_after_it():
    async def go():
        rt = _Runtime()
        e = Enforcer(rt)
        e.starting(CID)
        e.submit(CID, _res("0"), "default/a:c")
        await e.flush()
        assert rt.sent == [(CID, "0")] and e.busy(CID)  # the start is still in flight
        assert e.started(CID)
        await e.flush()
        assert rt.sent == [(CID, "0"), (CID, "0")] and not e.busy(CID)
        assert e.stats().resent_after_start == 1
    asyncio.run(go())


def test_update_on_the_wire_when_the_start_begins_is_sent_again():
    async def go():
        rt = _Runtime()
        rt.gate = asyncio.Event()
        e = Enforcer(rt)
        e.submit(CID, _res("0-1"), "")
        await rt.entered.wait()  # on the wire
        e.starting(CID)
        rt.gate.set()
        await e.flush()
        assert e.started(CID)
        await e.flush()
        assert rt.sent == [(CID, "0-1"), (CID, "0-1")]
    asyncio.run(go())


def test_update_done_before_the_start_or_superseded_is_not_sent_twice():
    async def go():
        rt = _Runtime()
        e = Enforcer(rt)
        e.submit(CID, _res("0"), "")
        await e.flush()
        e.starting(CID)  # the start reads the updated spec: nothing raced it
        assert not e.started(CID)
        # A newer update queued when the start returns goes out anyway: not the older one again.
        rt.gate = asyncio.Event()
        rt.entered.clear()
        e.starting(CID)
        e.submit(CID, _res("1"), "")
        await rt.entered.wait()
        e.submit(CID, _res("0-1"), "")  # queued behind the one on the wire
        assert e.started(CID)
        rt.gate.set()
        await e.flush()
        assert rt.sent == [(CID, "0"), (CID, "1"), (CID, "0-1")]
        assert e.stats().resent_after_start == 0
    asyncio.run(go())


class _Flaky(_Runtime):
    """Fails its first update with an error that is no runtime's answer (a closed channel,
    a bug below): the enforcer must retry it and live on."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def update(self, container_id, resources, timeout=10.0):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("channel closed")
        await super().update(container_id, resources, timeout)


def test_an_unexpected_error_is_a_failed_attempt_not_the_end_of_updates(caplog):
    async def go():
        rt = _Flaky()
        e = Enforcer(rt, backoff=0)
        e.submit(CID, _res("0"), "default/a:c")
        await asyncio.wait_for(e.flush(), 30)  # a hang guard, not a speed check
        assert rt.sent == [(CID, "0")]  # the failed attempt retried, not lost
        e.submit(CID, _res("1"), "")
        await asyncio.wait_for(e.flush(), 30)
        assert rt.sent == [(CID, "0"), (CID, "1")] and e.stats().failed == 0
        await e.close()
    with caplog.at_level(logging.WARNING):
        asyncio.run(go())
    assert "RuntimeError: channel closed" in caplog.text


# -- the real cpuset, read from the cgroup ---------------------------------------------------


def _proc(tmp: Path, mounts: str, cgroup: str, pid: int = 4321) -> Path:
    proc = tmp / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(mounts.format(root=tmp))
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "cgroup").write_text(cgroup)
    return proc


HYBRID = ("31 23 0:28 / {root}/cg rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "34 31 0:31 / {root}/cg/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
          "35 31 0:32 / {root}/cg/memory rw,relatime - cgroup cgroup rw,memory\n"
          "41 31 0:38 / {root}/cg/unified rw,relatime - cgroup2 cgroup2 rw\n")
UNIFIED = "30 23 0:26 / {root}/cg rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def _cgroup_dir(base: Path, cpus: str, mems: str) -> None:
    base.mkdir(parents=True)
    (base / "cpuset.cpus").write_text(cpus + "\n")
    (base / "cpuset.mems").write_text(mems + "\n")


def test_reads_the_v1_cpuset_hierarchy_of_a_hybrid_host(tmp_path):
    path = f"/kubepods/besteffort/pod1/{CID}"
    proc = _proc(tmp_path, HYBRID, f"4:memory:{path}\n3:cpuset:{path}\n0::{path}\n")
    _cgroup_dir(tmp_path / "cg" / "cpuset" / path.lstrip("/"), "0-1,3", "0")
    _cgroup_dir(tmp_path / "cg" / "unified" / path.lstrip("/"), "", "")  # no cpuset controller there
    assert CgroupReader(str(proc)).read(4321, CID) == RealCpuset(CPUSet("0-1,3"), CPUSet("0"))


def test_reads_the_unified_hierarchy_and_systemd_scopes(tmp_path):
    path = f"/kubepods.slice/kubepods-pod1.slice/cri-containerd-{CID}.scope"
    proc = _proc(tmp_path, UNIFIED, f"0::{path}\n")
    _cgroup_dir(tmp_path / "cg" / path.lstrip("/"), "2", "")
    assert CgroupReader(str(proc)).read(4321, CID) == RealCpuset(CPUSet("2"), None)


@pytest.mark.parametrize("cgroup, cpus", [
    ("0::/kubepods/pod1/another-container\n", "1"),  # a reused pid: not this container's cgroup
    (f"0::/kubepods/pod1/{CID}\n", ""),  # cgroup v2 without a cpuset set: nothing to compare
    (f"0::/kubepods/../../{CID}\n", "1"),  # no escaping the mount
    ("", "1"),
])
def test_what_cannot_be_trusted_is_unknown(tmp_path, cgroup, cpus):
    proc = _proc(tmp_path, UNIFIED, cgroup)
    _cgroup_dir(tmp_path / "cg" / "kubepods" / "pod1" / CID, cpus, "0")
    reader = CgroupReader(str(proc))
    assert reader.read(4321, CID) is None
    assert reader.read(999999, CID) is None  # no such process


def test_no_cgroup_mounts_means_nothing_is_checked(tmp_path, caplog):
    reader = CgroupReader(str(tmp_path / "no-proc"))
    assert reader.read(1, CID) is None
    assert reader.mounts() == (None, None)
    assert "real cpusets are not checked" in caplog.text


# -- the reconcile sends the policy's cpuset again where the cgroup differs ---------------------


@pytest.fixture
def engine(tmp_path):
    made: list[Engine] = []

    def make(proc: Path) -> Engine:
        made.append(Engine(dict(sockets=1, cores_per_die=4, threads_per_core=1), STATIC,
                           cgroups=CgroupReader(str(proc))))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_reconcile_resends_a_cpuset_the_cgroup_does_not_hold_once(tmp_path, engine, caplog):
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(UNIFIED.format(root=tmp_path))
    e = engine(proc)
    shared = e.kubelet.start_pod(besteffort("s")).container_ids["c"]
    excl = e.kubelet.start_pod(guaranteed("g", "1")).container_ids["c"]
    e.flush()
    want = e.fake.cpuset(shared)
    for pid, cid, cpus in ((100, shared, want), (101, excl, e.fake.cpuset(excl))):
        e.fake.pids[cid] = pid
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cgroup").write_text(f"0::/kubepods/{cid}\n")
        _cgroup_dir(tmp_path / "cg" / "kubepods" / cid, cpus, "0")
    assert e.loop.run(e.ctl.reconcile()) == {"gone": 0, "adopted": 0, "resent": 0}  # all as they should be

    # The shared container's task never got the shrink (its start raced the update).
    cpus_file = tmp_path / "cg" / "kubepods" / shared / "cpuset.cpus"
    cpus_file.write_text("0-3\n")
    updates = e.fake.updates
    assert e.loop.run(e.ctl.reconcile())["resent"] == 1
    e.flush()
    assert e.fake.updates == updates + 1 and e.fake.cpuset(shared) == want
    warned = [r.getMessage() for r in caplog.records if "in its cgroup" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("default/s:c ") and "sending its cpuset again" in warned[0]

    # Still so after it was sent again (a runtime that does not apply it): said once, not sent every round.
    for _ in range(3):
        assert e.loop.run(e.ctl.reconcile())["resent"] == 0
    e.flush()
    assert e.fake.updates == updates + 1
    stuck = [r.getMessage() for r in caplog.records if "leaving it" in r.getMessage()]
    assert len(stuck) == 1, stuck

    # Fixed behind our back: nothing to do; a later difference is sent again.
    cpus_file.write_text(want + "\n")
    assert e.loop.run(e.ctl.reconcile())["resent"] == 0
    cpus_file.write_text("0-3\n")
    assert e.loop.run(e.ctl.reconcile())["resent"] == 1
    families = {f.name: f for f in EngineCollector(e.ctl).collect()}
    fixed = {s.labels["action"]: s.value for s in families["cri_resmgr_reconcile_fixed_containers"].samples
             if s.name.endswith("_total")}
    assert fixed["resent"] == 2
