"""Runs the balloons policy through `cri-resmgr simulate`'s path (pods in order, as kubelet
creates them) and reads back where each container ended: for tests that state what users
of the reference implementations expect, in their terms (balloon, CPUs, cores, nodes)."""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from cri_resmgr.config import parse_document
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.engine import Outcome, simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuset import CPUSet

FIXTURES = Path(__file__).resolve().parents[2] / ".." / ".." / "shared" / "fixtures" / "sysfs"
FIXTURES_MAIN = Path("/work/shared/fixtures/sysfs")


@dataclass(frozen=True)
class Placed:
    balloon: str
    cpus: CPUSet
    mems: str | None


def run(config: str, pods: str, machine: str | Topology) -> tuple[Outcome, dict[str, Placed]]:
    """Simulates `pods` (YAML) under `config` (YAML); where every live container is, by
    `pod:container`."""
    registry = default_registry()
    cfg = parse_document(textwrap.dedent(config), "config.yaml", registry.names())
    topo = topology_of(machine) if isinstance(machine, str) else machine
    o = simulate(pod_calls(parse_pods(textwrap.dedent(pods), "pods.yaml")), topo, cfg, "balloons", registry)
    assert o.policy_errors == 0, o.messages
    assert o.checker.count == 0, o.checker.violations  # the simulator's invariants, isolation included
    where: dict[str, Placed] = {}
    for c in o.cache:
        if c.released:
            continue
        r = o.policy.resources(c.key)
        a = o.policy.assignment(c.key)
        assert r is not None and a is not None
        where[f"{c.workload.pod}:{c.workload.name}"] = Placed(a.pool, r.cpuset_cpus, r.cpuset_mems)
    return o, where


def cores(topo: Topology, cpus: CPUSet) -> set[CPUSet]:
    return {topo.siblings(c) for c in cpus}


def nodes(topo: Topology, cpus: CPUSet) -> set[int]:
    return {topo.node_of(c) for c in cpus}


_MACHINES: dict[tuple[str, str], Topology] = {}


def real_machine(tmp_path_factory: pytest.TempPathFactory, archive: str, inside: str) -> Topology:
    """A real machine's sysfs from /work/shared/fixtures (skipped where absent), unpacked once
    a session: only `inside`, by tar (Python's bz2 reader takes seconds on a busy machine)."""
    key = (archive, inside)
    if key in _MACHINES:
        return _MACHINES[key]
    for base in (FIXTURES, FIXTURES_MAIN):
        path = base / archive
        if path.exists():
            break
    else:
        pytest.skip(f"real-machine sysfs {archive} not present")
    root = tmp_path_factory.mktemp(archive.split(".")[0])
    skip = [f"--exclude={d}" for d in ("cpuidle", "acpi_cppc", "power", "thermal_throttle", "hotplug", "microcode")]
    subprocess.run(["tar", "-xjf", str(path), "-C", str(root), *skip, inside], check=True)
    _MACHINES[key] = topo = discover(str(root / inside))
    return topo
