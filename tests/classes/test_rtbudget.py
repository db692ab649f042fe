"""The RT budget of a container's cgroup chain (cgroup v1, RT group scheduling): on a
kernel-like tree, parents first and only what is short; and on this machine's real cpu
hierarchy, SCHED_FIFO refused with EPERM in a new cgroup until the chain has a budget,
everything written put back after."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from cri_resmgr.classes.hostfs import HostRoot
from cri_resmgr.classes.rtbudget import CPU_ROOT, RUNTIME, RtBudget
from cri_resmgr.classes.sched import Syscalls, apply_all
from cri_resmgr.policy.schedclass import SchedClass

FIFO = SchedClass("rt", policy="fifo", priority=10)


def _tree(root: Path, values: dict[str, int]) -> None:
    for rel, value in values.items():
        d = root / CPU_ROOT / rel if rel else root / CPU_ROOT
        d.mkdir(parents=True, exist_ok=True)
        (d / RUNTIME).write_text(f"{value}\n")
        (d / "cpu.rt_period_us").write_text("1000000\n")


def test_the_chain_gets_a_budget_parents_first_and_it_goes_back(tmp_path):
    _tree(tmp_path, {"": 950000, "kubepods": 0, "kubepods/pod1": 0, "kubepods/pod1/c1": 0,
                     "kubepods/pod1/c0": 20000, "other": 100000})
    notes: list[str] = []
    rt = RtBudget(HostRoot(str(tmp_path)), notes.append)
    assert rt.available()
    assert rt.ensure("c1", f"{CPU_ROOT}/kubepods/pod1/c1") is None
    read = lambda rel: int((tmp_path / CPU_ROOT / rel / RUNTIME).read_text())  # noqa: E731
    # The container 5% of its period; its pod that and its sibling's; kubepods the pod's.
    assert (read("kubepods"), read("kubepods/pod1"), read("kubepods/pod1/c1")) == (70000, 70000, 50000)
    assert [n.split(" to ")[1] for n in notes] == [
        f"{tmp_path}/{CPU_ROOT}/{p}/{RUNTIME}" for p in ("kubepods", "kubepods/pod1", "kubepods/pod1/c1")]
    assert read("other") == 100000  # a sibling of the chain: never written
    notes.clear()
    assert rt.ensure("c1", f"{CPU_ROOT}/kubepods/pod1/c1") is None and notes == []  # has it: nothing written
    rt.release("c1")
    assert (read("kubepods"), read("kubepods/pod1"), read("kubepods/pod1/c1"), read("kubepods/pod1/c0")) == \
        (0, 0, 0, 20000)
    assert rt.held() == {}


def test_two_containers_share_the_levels_until_both_are_gone(tmp_path):
    _tree(tmp_path, {"": 950000, "k": 0, "k/a": 0, "k/b": 0})
    rt = RtBudget(HostRoot(str(tmp_path)))
    assert rt.ensure("a", f"{CPU_ROOT}/k/a") is None
    assert rt.ensure("b", f"{CPU_ROOT}/k/b") is None
    read = lambda rel: int((tmp_path / CPU_ROOT / rel / RUNTIME).read_text())  # noqa: E731
    assert (read("k"), read("k/a"), read("k/b")) == (100000, 50000, 50000)
    rt.release("a")
    assert read("k") == 100000 and read("k/a") == 0  # b still needs its parent
    rt.close()
    assert (read("k"), read("k/b")) == (0, 0)


def test_a_tree_without_rt_group_scheduling_is_no_place_for_budgets(tmp_path):
    (tmp_path / CPU_ROOT).mkdir(parents=True)
    assert not RtBudget(HostRoot(str(tmp_path))).available()


REAL = Path("/sys/fs/cgroup/cpu")


@pytest.mark.skipif(os.geteuid() != 0 or not (REAL / RUNTIME).exists(),
                    reason="needs root and cgroup v1 with RT group scheduling")
def test_fifo_in_a_new_real_cgroup_needs_the_budget_and_the_host_is_left_as_it_was():
    top = REAL / f"crirm-test-rt-{secrets.token_hex(4)}"
    leaf = top / "pod" / "c"
    leaf.mkdir(parents=True)
    p = subprocess.Popen(["sleep", "60"])
    try:
        (leaf / "tasks").write_text(str(p.pid))
        done, refused = apply_all(Syscalls(), [p.pid], FIFO)
        assert done == [] and refused is not None and refused.errno == 1  # EPERM: no RT budget
        rt = RtBudget(HostRoot("/"))
        rel = str(leaf.relative_to("/"))
        assert rt.ensure("c", rel) is None
        assert int((leaf / RUNTIME).read_text()) > 0
        assert apply_all(Syscalls(), [p.pid], FIFO) == ([p.pid], None)
        assert os.sched_getscheduler(p.pid) == os.SCHED_FIFO
        p.kill()
        p.wait()
        rt.release("c")
        assert [int((d / RUNTIME).read_text()) for d in (top, top / "pod", leaf)] == [0, 0, 0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for d in (leaf, leaf.parent, top):
            d.rmdir()


def test_a_budget_the_kernel_refuses_is_one_line_naming_the_cgroup(tmp_path):
    import errno

    class FullRoot(HostRoot):  # the root's runtime spoken for: the kernel's EINVAL
        def write(self, rel: str, text: str) -> None:
            raise OSError(errno.EINVAL, "Invalid argument")

    _tree(tmp_path, {"": 950000, "k": 0, "k/c": 0})
    why = RtBudget(FullRoot(str(tmp_path))).ensure("c", f"{CPU_ROOT}/k/c")
    assert why is not None and "\n" not in why
    assert why.startswith(f"the kernel refuses {RUNTIME} 50000 in {tmp_path}/{CPU_ROOT}/k (Invalid argument)")


def test_within_what_the_root_leaves(tmp_path):
    _tree(tmp_path, {"": 950000, "busy": 930000, "k": 0, "k/c": 0})
    rt = RtBudget(HostRoot(str(tmp_path)))
    assert rt.ensure("c", f"{CPU_ROOT}/k/c") is None
    read = lambda rel: int((tmp_path / CPU_ROOT / rel / RUNTIME).read_text())  # noqa: E731
    assert (read("k"), read("k/c")) == (20000, 20000)  # less than 5%, but a budget
