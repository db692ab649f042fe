"""`cri-resmgr topology` on the guest's real sysfs (issue 33.3): where one L3 cache spans a
socket of several NUMA nodes, the text shows under each node the cache the kernel describes
(cache/index3/shared_cpu_list), as `-o json` does, not each node's part as a cache of its
own (before: `L3 0-1` under node 0 of a socket whose L3 is 0-3)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.vm.guest import cgv2

pytestmark = pytest.mark.topologies("2node", "4node")


def kernel_l3(cpu: int) -> CPUSet | None:
    for index in sorted((cgv2.SYS_CPU / f"cpu{cpu}" / "cache").glob("index*")):
        if (index / "level").read_text().strip() == "3":
            return CPUSet((index / "shared_cpu_list").read_text().strip())
    return None


def topology(*args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "cri_resmgr.cli", "topology", *args], capture_output=True,
                         text=True, timeout=cgv2.WAIT, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_text_shows_each_nodes_l3_as_the_kernel_has_it() -> None:
    nodes = {n: c for n, c in cgv2.node_cpus().items() if c}
    l3_of_node = {n: kernel_l3(c.min()) for n, c in nodes.items()}
    if any(v is None for v in l3_of_node.values()):
        pytest.fail(f"the guest's CPUs describe no L3 cache (qemu's l3-cache): {l3_of_node}")
    # The premise: on this machine an L3 spans more than one NUMA node.
    assert any(len(cgv2.node_of(l3)) > 1 for l3 in l3_of_node.values() if l3), l3_of_node

    text = topology()
    shown: dict[int, list[CPUSet]] = {}
    node = None
    for line in text.splitlines():
        m = re.match(r"\s*NUMANode (\d+)\b", line)
        if m:
            node = int(m.group(1))
        m = re.match(r"\s*L3 ([0-9,-]+)", line)
        if m and node is not None:
            shown.setdefault(node, []).append(CPUSet(m.group(1)))
    assert shown == {n: [l3] for n, l3 in l3_of_node.items()}, f"kernel {l3_of_node}; text:\n{text}"

    doc = json.loads(topology("-o", "json"))
    assert sorted(str(CPUSet(g)) for g in doc["groups"]["l3"]) == \
        sorted({str(v) for v in l3_of_node.values()}), doc["groups"]


def test_guest_sysfs_is_what_qemu_was_told() -> None:
    """The premise of every test here: the topology the host's harness asked qemu for."""
    nodes = cgv2.node_cpus()
    online = cgv2.online_cpus()
    assert CPUSet([c for cpus in nodes.values() for c in cpus]) == online
    assert Path("/sys/fs/cgroup/cgroup.controllers").exists(), "not cgroup v2"
    assert not Path("/sys/fs/cgroup/cpuset").exists(), "a v1 hierarchy is mounted"
