"""Fixtures for the policy tests: generated sysfs topologies and workload builders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cri_resmgr.topology import Topology, discover
from tests.harness.sysfs import generate


@pytest.fixture
def make_topology(tmp_path: Path) -> Callable[..., Topology]:
    """generate(**shape) into a fresh directory under tmp_path, then discover it."""
    counter = iter(range(1_000_000))

    def build(**shape) -> Topology:
        root = tmp_path / f"host{next(counter)}"
        generate(root, **shape)
        return discover(root)

    return build


@pytest.fixture(scope="session")
def big_topology(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    """2 sockets x 64 cores x 2 threads, 4 NUMA nodes per socket: 256 CPUs, 8 nodes;
    the kernel isolates 32 CPUs (for static-plus)."""
    root = tmp_path_factory.mktemp("bighost")
    generate(root, sockets=2, cores_per_die=64, threads_per_core=2, numa_per_socket=4,
             numbering="interleaved", isolated=range(200, 232))
    return discover(root)
