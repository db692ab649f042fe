"""What the guest's kernel says about a container, on cgroup v2: its cgroup directory (from
/proc/PID/cgroup's "0::" line), the cpuset it enforces (cpuset.cpus.effective,
cpuset.mems.effective) and where its process may run (/proc/PID/status). And the machine's
NUMA nodes and cores from sysfs. The tests judge the product by these, never by its own
reports alone."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.kubelet import Kubelet

CGROUP2 = Path("/sys/fs/cgroup")
SYS_NODE = Path("/sys/devices/system/node")
SYS_CPU = Path("/sys/devices/system/cpu")
WAIT = 180.0  # a bound for the slow guest, not a measure


def cgroup_dir_of_pid(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return CGROUP2 / line[3:].lstrip("/")
    raise AssertionError(f"/proc/{pid}/cgroup has no cgroup v2 line: is this guest cgroup v2 only?")


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"/proc/{pid}/status has no {name}")


@dataclass(frozen=True)
class Placement:
    """A container's placement as the kernel enforces it."""

    cgroup: Path
    cpus: CPUSet  # cpuset.cpus.effective
    mems: CPUSet  # cpuset.mems.effective
    allowed_cpus: CPUSet  # Cpus_allowed_list
    allowed_mems: CPUSet  # Mems_allowed_list

    def __str__(self) -> str:
        return (f"{self.cgroup}: cpus.effective {self.cpus}, mems.effective {self.mems}, "
                f"Cpus_allowed_list {self.allowed_cpus}, Mems_allowed_list {self.allowed_mems}")


def placement(k: Kubelet, cid: str) -> Placement:
    pid = k.container_pid(cid)
    cg = cgroup_dir_of_pid(pid)
    return Placement(cg, CPUSet((cg / "cpuset.cpus.effective").read_text().strip()),
                     CPUSet((cg / "cpuset.mems.effective").read_text().strip()),
                     CPUSet(status_field(pid, "Cpus_allowed_list")), CPUSet(status_field(pid, "Mems_allowed_list")))


def wait_placement(k: Kubelet, cid: str, cpus: CPUSet | str, mems: CPUSet | str | None = None,
                   timeout: float = WAIT) -> Placement:
    """Updates land asynchronously: wait (bounded) until the kernel enforces `cpus` (and
    `mems`) on the container, in its cgroup and for its process."""
    want_cpus = CPUSet(cpus) if isinstance(cpus, str) else cpus
    want_mems = CPUSet(mems) if isinstance(mems, str) else mems
    deadline = time.monotonic() + timeout
    while True:
        p = placement(k, cid)
        if p.cpus == want_cpus and p.allowed_cpus == want_cpus and (
                want_mems is None or (p.mems == want_mems and p.allowed_mems == want_mems)):
            return p
        if time.monotonic() > deadline:
            pytest.fail(f"container {cid[:12]}: {p}; want cpus {want_cpus}"
                        + (f", mems {want_mems}" if want_mems is not None else ""))
        time.sleep(0.5)


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """check() until it returns something true (bounded); that value."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"never happened within {timeout}s: {what}")
        time.sleep(0.5)


def online_cpus() -> CPUSet:
    return CPUSet((SYS_CPU / "online").read_text().strip())


def node_cpus() -> dict[int, CPUSet]:
    """NUMA node -> its CPUs (an empty set for a memory-only node)."""
    out = {}
    for d in sorted(SYS_NODE.glob("node[0-9]*")):
        out[int(d.name[4:])] = CPUSet((d / "cpulist").read_text().strip())
    return out


def node_of(cpus: CPUSet) -> CPUSet:
    """The nodes holding `cpus`."""
    return CPUSet([n for n, c in node_cpus().items() if c & cpus])


def core_of(cpu: int) -> CPUSet:
    return CPUSet((SYS_CPU / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())


def package_of(cpu: int) -> int:
    return int((SYS_CPU / f"cpu{cpu}" / "topology" / "physical_package_id").read_text())


def whole_cores(cpus: CPUSet) -> bool:
    return all(core_of(c) <= cpus for c in cpus)


def relay_state(state_dir: str) -> dict[str, Any]:
    return json.loads((Path(state_dir) / "state.json").read_text())  # type: ignore[no-any-return]


def container_pids(k: Kubelet, cids: list[str]) -> dict[str, int]:
    return {c: k.container_pid(c) for c in cids}
