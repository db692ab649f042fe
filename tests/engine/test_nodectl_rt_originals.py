"""RT budgets across a crash: a run killed before its shutdown leaves the budgets it gave
a container's cgroup chain (cgroup v1, RT group scheduling); what the levels held before
is kept in the state directory, and the next start's first sync puts them back once no
container needs them (kernel-like tree)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cri_resmgr.classes.hostfs import HostRoot
from cri_resmgr.classes.rtbudget import CPU_ROOT, RUNTIME
from cri_resmgr.classes.sched import Syscalls
from cri_resmgr.engine.nodectl import NodeControl
from cri_resmgr.topology.cpuset import CPUSet


def _tree(root: Path, values: dict[str, int]) -> None:
    for rel, value in values.items():
        d = root / CPU_ROOT / rel if rel else root / CPU_ROOT
        d.mkdir(parents=True, exist_ok=True)
        (d / RUNTIME).write_text(f"{value}\n")
        (d / "cpu.rt_period_us").write_text("1000000\n")


def _node(root: Path, saved: Path) -> NodeControl:
    return NodeControl(HostRoot(str(root)), Syscalls(), runtime=None,  # type: ignore[arg-type]
                       online=lambda: CPUSet.parse("0-3"), rt_saved=str(saved))


def test_a_restart_after_a_crash_puts_the_rt_budgets_back(tmp_path):
    _tree(tmp_path, {"": 950000, "kubepods": 0, "kubepods/pod1": 0, "kubepods/pod1/c1": 0, "other": 100000})
    read = lambda rel: int((tmp_path / CPU_ROOT / rel / RUNTIME).read_text())  # noqa: E731
    saved = tmp_path / "state" / "rt-budget-originals.json"
    killed = _node(tmp_path, saved)
    # What a fifo class's StartContainer does first (engine/nodectl.py `_enforce`).
    assert killed._rt.ensure("c1", f"{CPU_ROOT}/kubepods/pod1/c1") is None
    assert (read("kubepods"), read("kubepods/pod1"), read("kubepods/pod1/c1")) == (50000, 50000, 50000)
    assert saved.exists()
    # SIGKILL: no shutdown. The next start's first sync, with the container gone.
    asyncio.run(_node(tmp_path, saved).sync([], None))
    assert (read("kubepods"), read("kubepods/pod1"), read("kubepods/pod1/c1"), read("other")) == \
        (0, 0, 0, 100000)
    assert not saved.exists()  # nothing held


def test_a_shutdown_leaves_no_file(tmp_path):
    _tree(tmp_path, {"": 950000, "k": 0, "k/a": 0})
    saved = tmp_path / "state" / "rt-budget-originals.json"
    node = _node(tmp_path, saved)
    assert node._rt.ensure("a", f"{CPU_ROOT}/k/a") is None and saved.exists()
    asyncio.run(node.close())
    assert int((tmp_path / CPU_ROOT / "k" / RUNTIME).read_text()) == 0
    assert not saved.exists()
