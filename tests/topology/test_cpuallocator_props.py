"""Property tests of the allocation rules (issue 10) on every class of machine.

Random allocate/release sequences with fixed seeds. On the small shapes each
allocation is compared with the brute-force reference (tests/topology/
reference.py); on the 512-CPU shapes and the real-machine trees the rules
that are cheap to check are checked directly.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.realsysfs import FIXTURES  # beside the main checkout or a worktree
from tests.topology.reference import best_rule_key, fewest_nodes, rule_key
from tests.topology.shapes import SHAPES

SMALL = [name for name in SHAPES if not name.endswith("512") and not name.endswith("ccx")]
BIG = [name for name in SHAPES if name not in SMALL]

SYS = "sys/devices/system"
FIXTURE_TREES = {
    "xeon-2socket-4numa-80cpu.tar.bz2": ["sysfs/2-socket-4-node-40-core"],
    "xeon-desktop-server-4socket.tar.bz2": ["sysfs/desktop", "sysfs/server", "sysfs/4-socket-server-nosnc"],
}


def churn(topo: Topology, seed: int, steps: int, reserved: CPUSet = CPUSet(),
          max_n: int | None = None) -> Iterator[tuple[CPUAllocator, CPUSet, int, CPUSet]]:
    """Random allocate/release sequence; yields (allocator, free, n, result)."""
    alloc = CPUAllocator(topo)
    rnd = random.Random(seed)
    free = topo.online - reserved
    held: list[CPUSet] = []
    for _ in range(steps):
        if held and (rnd.random() < 0.4 or not free):
            free = alloc.release(free, held.pop(rnd.randrange(len(held))))
        if not free:
            continue
        n = rnd.randint(1, min(len(free), max_n or len(free)))
        got = alloc.allocate(free, n)
        yield alloc, free, n, got
        free = free - got
        held.append(got)


def check_basic(topo: Topology, free: CPUSet, n: int, got: CPUSet) -> None:
    """Only free (so online, non-reserved) CPUs, exactly n, none twice (a set)."""
    assert len(got) == n and got <= free and got <= topo.online


def check_nodes(topo: Topology, free: CPUSet, n: int, got: CPUSet) -> None:
    """Fits one node: stays in one. Needs several: the fewest."""
    assert len(topo.nodes_of(got)) == fewest_nodes(topo, free, n), (free, n, got)


@pytest.mark.parametrize("shape", SMALL)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_shapes_match_the_reference(shape, seed):
    topo = SHAPES[shape]()
    reserved = CPUSet([topo.online.min()]) if seed == 3 else CPUSet()
    for _alloc, free, n, got in churn(topo, seed, steps=40, reserved=reserved):
        check_basic(topo, free, n, got)
        assert not got & reserved
        check_nodes(topo, free, n, got)
        assert rule_key(topo, free, got) == best_rule_key(topo, free, n), (shape, str(free), n, str(got))


@pytest.mark.parametrize("shape", BIG)
def test_big_shapes_keep_the_cheap_rules(shape):
    topo = SHAPES[shape]()
    twin = CPUAllocator(topo)
    for _alloc, free, n, got in churn(topo, seed=11, steps=150, max_n=96):
        check_basic(topo, free, n, got)
        check_nodes(topo, free, n, got)
        # Deterministic: a separately built allocator decides the same.
        assert twin.allocate(free, n) == got
        # A request of whole cores with enough whole cores free in its node splits none.
        if n % 2 == 0 and len(topo.nodes_of(got)) == 1:
            node = topo.node_cpus(topo.nodes_of(got)[0])
            whole = sum(1 for core in topo.cores() if core <= free & node)
            if whole * 2 >= n:
                assert all(topo.siblings(c) <= got for c in got), (str(free), n, str(got))


def _fixture_topologies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Topology]]:
    if not FIXTURES.is_dir():
        pytest.skip(f"no real-machine sysfs trees at {FIXTURES}")
    if shutil.which("tar") is None:
        pytest.skip("tar is needed to unpack the real-machine sysfs trees")
    # Only the files discovery reads: unpacking everything takes half a minute.
    wanted = [f"sysfs/*/{SYS}/cpu/{name}" for name in (
        "online", "offline", "isolated", "cpu*/online", "cpu*/topology/*",
        "cpu*/cache/index*/level", "cpu*/cache/index*/type", "cpu*/cache/index*/shared_cpu_list",
    )] + [f"sysfs/*/{SYS}/node/node*/{name}" for name in ("cpulist", "cpumap", "distance", "meminfo")]
    for archive, trees in FIXTURE_TREES.items():
        root = tmp_path_factory.mktemp(archive.split(".")[0])
        subprocess.run(
            ["tar", "-xjf", str(FIXTURES / archive), "-C", str(root), "-m", "--no-same-owner",
             "--no-same-permissions", "--wildcards", "--no-wildcards-match-slash", *wanted],
            check=True,
        )
        for tree in trees:
            yield tree, discover(root / tree)


@pytest.fixture(scope="module")
def real_machines(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Topology]]:
    return list(_fixture_topologies(tmp_path_factory))


def test_real_machine_trees_keep_the_cheap_rules(real_machines):
    assert len(real_machines) == 4
    for _name, topo in real_machines:
        for _alloc, free, n, got in churn(topo, seed=5, steps=120, max_n=48):
            check_basic(topo, free, n, got)
            check_nodes(topo, free, n, got)


# -- the allocator on the discovered trees of every machine class (part A's generator) ------



def _class_names() -> list[str]:
    from tests.harness.sysfs_classes import CLASSES
    return list(CLASSES)


@pytest.mark.parametrize("name", _class_names())
def test_discovered_machine_classes_keep_the_rules(name):
    """What discovery reads from each class's sysfs tree is what the allocator places on:
    the rules hold on it, and on the small ones each allocation is the reference's best."""
    from tests.harness.discovered import discovered
    topo = discovered(name)
    small = len(topo.online) <= 16
    steps, max_n = (30, None) if small else (60, 64)
    for _alloc, free, n, got in churn(topo, seed=7, steps=steps, max_n=max_n):
        check_basic(topo, free, n, got)
        check_nodes(topo, free, n, got)
        if small:
            assert rule_key(topo, free, got) == best_rule_key(topo, free, n), (name, str(free), n, str(got))
