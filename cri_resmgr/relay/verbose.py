"""What containerd's and CRI-O's verbose status tells beyond CRI's fields.

A verbose PodSandboxStatus or ContainerStatus carries the runtime's own JSON at
info["info"]: the pod's cgroup parent, the container's OCI runtime spec (its
resources and cgroups path) and its init pid. These readers turn that JSON into the
values of the engine's runtime port; whatever shape it has, they answer (with
nothing when it tells nothing), never raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.bounded import parse_json

CRIO_CGROUP_PARENT = "io.kubernetes.cri-o.CgroupParent"
# The longest info JSON read: a real one is a few kilobytes.
_MAX_INFO = 16 * 1024 * 1024
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _data(info: Mapping[str, str]) -> dict[str, Any]:
    text = info.get("info", "")
    if not text or len(text) > _MAX_INFO:
        return {}
    try:
        data = parse_json(text)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def cgroup_parent(info: Mapping[str, str]) -> str:
    """containerd: info.config.linux.cgroup_parent; CRI-O: a runtime spec annotation."""
    data = _data(info)
    parent = _dict(_dict(data.get("config")).get("linux")).get("cgroup_parent")
    if parent:
        return str(parent)
    parent = _dict(_dict(data.get("runtimeSpec")).get("annotations")).get(CRIO_CGROUP_PARENT)
    return str(parent or "")


def resources(info: Mapping[str, str]) -> pb.LinuxContainerResources:
    """The container's resources as its OCI runtime spec holds them."""
    r = _dict(_dict(_dict(_data(info).get("runtimeSpec")).get("linux")).get("resources"))
    cpu, mem = _dict(r.get("cpu")), _dict(r.get("memory"))
    return pb.LinuxContainerResources(
        cpu_period=_int(cpu.get("period")), cpu_quota=max(_int(cpu.get("quota")), 0),
        cpu_shares=_int(cpu.get("shares")), memory_limit_in_bytes=max(_int(mem.get("limit")), 0),
        cpuset_cpus=str(cpu.get("cpus") or ""), cpuset_mems=str(cpu.get("mems") or ""))


def pid(info: Mapping[str, str]) -> int:
    """The container's init pid (containerd and CRI-O both put it at "pid"); 0 if not there."""
    value = _data(info).get("pid")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def cgroups_path(info: Mapping[str, str]) -> str:
    """The container's cgroupsPath from its runtime spec; "" if not there."""
    path = _dict(_dict(_data(info).get("runtimeSpec")).get("linux")).get("cgroupsPath")
    return path if isinstance(path, str) else ""


def _int(value: object) -> int:
    """A spec's number (or its text); 0 for anything else, and for a number the CRI
    fields (int64) cannot hold: protobuf would raise on it."""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = int(value)
        except (ValueError, OverflowError):
            return 0
        return number if _INT64_MIN <= number <= _INT64_MAX else 0
    return 0
