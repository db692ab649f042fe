"""A pod cgroup narrowed by hand on cgroup v2 (issue 33.2): the container's cpuset.cpus still
holds the policy's set, but the kernel runs its tasks on what the parent allows
(cpuset.cpus.effective). The reconcile judges the effective set, says so once naming the
cgroup that narrows it, shows it in /state and `cri-resmgr status`, and does not send the
cpuset again (that cannot widen a child beyond its parent). The tree is a v2 node's under a
tmp root whose cpuset files behave as the kernel's (tests/harness/cgroupfs.py)."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest
from test_engine_fake_runtime import Engine, besteffort

from cri_resmgr.engine.realcpuset import CgroupReader
from cri_resmgr.status import command
from tests.harness import cgroupfs

POLICY = "policy: {Active: static, ReservedResources: {CPU: 1}}\n"
POD = "kubepods/besteffort/pod-s"


@pytest.fixture
def node(tmp_path):
    made: list[Engine] = []
    root = tmp_path / "host"
    cgroupfs.build_v2(root, cpus="0-3")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        f"30 23 0:26 / {root}/sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")

    def make() -> tuple[Engine, Path, Path]:
        made.append(Engine(dict(sockets=1, cores_per_die=4, threads_per_core=1), POLICY,
                           cgroups=CgroupReader(str(proc))))
        return made[-1], root, proc

    yield make
    for e in made:
        e.close()


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("cri_resmgr") and r.levelno >= logging.WARNING]


def test_a_pod_cgroup_narrowed_by_hand_is_said_once_and_shown(node, caplog):
    e, root, proc = node()
    cid = e.kubelet.start_pod(besteffort("s")).container_ids["c"]
    e.flush()
    want = e.fake.cpuset(cid)  # the shared pool: 1-3
    e.fake.pids[cid] = 100
    (proc / "100").mkdir()
    (proc / "100" / "cgroup").write_text(f"0::/{POD}/{cid}\n")
    cgroupfs.v2_cgroup(root, f"{POD}/{cid}", cpus=want)  # what runc wrote
    (root / "sys/fs/cgroup" / POD / cid / "cgroup.procs").write_text("100\n")
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    assert e.loop.run(e.ctl.reconcile())["resent"] == 0
    assert _warnings(caplog) == []

    # The pod's cgroup narrowed to CPU 2 by hand: the container's own cpuset.cpus is unchanged.
    pod_dir = root / "sys/fs/cgroup" / POD
    cgroupfs.write_like_kernel(root, pod_dir / "cpuset.cpus", "2")
    ctr = pod_dir / cid
    assert (ctr / "cpuset.cpus").read_text().strip() == want and (ctr / "cpuset.cpus.effective").read_text() == "2\n"
    updates = e.fake.updates
    for _ in range(3):
        assert e.loop.run(e.ctl.reconcile())["resent"] == 0  # sending it again cannot widen it
    e.flush()
    assert e.fake.updates == updates
    assert _warnings(caplog) == [
        f"default/s:c ({cid[:12]}) runs on CPUs 2 only, not the policy's {want}: its cgroup holds {want} but the "
        f"kernel narrows it to what cgroup /{POD} allows (its effective cpuset); the relay does not write cgroups "
        "it does not own: widen that cgroup's cpuset.cpus to put it right"]
    doc = e.ctl.state().to_document()
    (c,) = doc["containers"]
    assert (c["cpus"], c["effective_cpus"], c["narrowed_by"]) == (want, "2", f"/{POD}")
    assert command.render(doc, "text").splitlines()[-2:] == [
        "Warnings:", f"  default/s:c runs on CPUs 2 only, not {want}: cgroup /{POD} narrows it"]

    # Emptying it is refused while it has tasks (ENOSPC, as the kernel does); widened again: said,
    # and gone from /state.
    with pytest.raises(OSError) as refused:
        cgroupfs.write_like_kernel(root, pod_dir / "cpuset.cpus", "\n")
    assert refused.value.errno == errno.ENOSPC
    cgroupfs.write_like_kernel(root, pod_dir / "cpuset.cpus", "0-3")
    e.loop.run(e.ctl.reconcile())
    assert f"default/s:c ({cid[:12]}) runs on its CPUs {want} again" in caplog.text
    (c,) = e.ctl.state().to_document()["containers"]
    assert (c["effective_cpus"], c["narrowed_by"]) == (None, None)
    assert len(_warnings(caplog)) == 1


def test_the_effective_set_and_the_cgroup_that_narrows_it_are_read(tmp_path):
    root = tmp_path / "host"
    cgroupfs.build_v2(root, cpus="0-7")
    cgroupfs.v2_cgroup(root, "kubepods/pod1/ctr", cpus="0-1,4-7")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(f"30 23 0:26 / {root}/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    (proc / "7").mkdir()
    (proc / "7" / "cgroup").write_text("0::/kubepods/pod1/ctr\n")
    reader = CgroupReader(str(proc))
    got = reader.read(7, "ctr")
    assert got is not None and (str(got.cpus), str(got.effective), got.narrowed_by) == ("0-1,4-7", "0-1,4-7", None)
    # Narrowed two levels up: the cgroup named is the one whose set narrows it, not the pod's below it.
    cgroupfs.write_like_kernel(root, root / "sys/fs/cgroup/kubepods/cpuset.cpus", "1")
    got = reader.read(7, "ctr")
    assert got is not None and (str(got.cpus), str(got.enforced), got.narrowed_by) == ("0-1,4-7", "1", "/kubepods")


def test_v1_reads_cpuset_effective_cpus(tmp_path):
    """cgroup v1's cpuset hierarchy names the effective set cpuset.effective_cpus (a CPU offline, say)."""
    cg = tmp_path / "cg" / "cpuset"
    ctr = cg / "kubepods" / "pod1" / "ctr"
    ctr.mkdir(parents=True)
    for d, cpus, effective in ((cg, "0-3", "0-2"), (cg / "kubepods", "0-3", "0-2"),
                               (cg / "kubepods" / "pod1", "0-3", "0-2"), (ctr, "2-3", "2")):
        (d / "cpuset.cpus").write_text(cpus + "\n")
        (d / "cpuset.effective_cpus").write_text(effective + "\n")
    (ctr / "cpuset.mems").write_text("0\n")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(f"34 31 0:31 / {cg} rw,relatime - cgroup cgroup rw,cpuset\n")
    (proc / "7").mkdir()
    (proc / "7" / "cgroup").write_text("3:cpuset:/kubepods/pod1/ctr\n")
    got = CgroupReader(str(proc)).read(7, "ctr")
    assert got is not None and (str(got.cpus), str(got.enforced), got.narrowed_by) == ("2-3", "2", "/")
