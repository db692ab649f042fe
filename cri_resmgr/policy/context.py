"""Build a PolicyContext from the policy configuration section.

The configuration looks like (YAML)::

    policy:
      Active: static
      AvailableResources:
        CPU: cpuset:0-63        # or "0-63"; absent: all online CPUs
      ReservedResources:
        CPU: 1                  # a count; or "1500m" (rounded up); or cpuset:0-1
      static:
        StrictReservation: true # the policy's own options

`build_context(topology, available=..., reserved=..., options=...)` takes the
two resource sections (a mapping with a "CPU" key, or the CPU value itself)
and the policy's own option mapping.  Every problem raises ConfigValueError
whose message starts with the offending key, e.g.
"policy.ReservedResources.CPU: ...".
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from cri_resmgr.bounded import clip, short
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.policy.api import PolicyContext
from cri_resmgr.policy.quantity import parse_cpu_milli
from cri_resmgr.topology import Topology
from cri_resmgr.topology.cpuallocator import CPUAllocator
from cri_resmgr.topology.cpuset import CPUSet

__all__ = ["ConfigValueError", "build_context", "parse_available_cpus", "parse_reserved_cpus"]

AVAILABLE_KEY = "policy.AvailableResources"
RESERVED_KEY = "policy.ReservedResources"
CPUSET_PREFIX = "cpuset:"


class ConfigValueError(CriResmgrError, ValueError):
    """A configuration value is wrong; the message names its key."""


def build_context(
    topology: Topology,
    *,
    available: Mapping[str, Any] | str | None = None,
    reserved: Mapping[str, Any] | str | int | float | None = None,
    options: Mapping[str, Any] | None = None,
) -> PolicyContext:
    """The PolicyContext for `topology` and the configuration values.

    available -- the AvailableResources section ({"CPU": ...}) or its CPU value:
        a cpuset in kernel list syntax, optionally prefixed "cpuset:"
        ("0-7", "cpuset:0-3,8-11"). None or absent: all online CPUs.
    reserved -- the ReservedResources section ({"CPU": ...}) or its CPU value:
        * an int, a float or a Kubernetes CPU quantity string ("2", "500m",
          "1500m") is a COUNT, rounded up to whole CPUs; the CPUs are picked
          from the available ones by the topology-aware CPUAllocator;
        * a string prefixed "cpuset:" ("cpuset:0-1", "cpuset:3") is an
          explicit CPU SET.  Nothing else is: "3" means three CPUs, and "2-3"
          (no quantity, and no cpuset without the prefix) is refused, so that
          a typo never silently changes a count into a set.
        None or absent: no reserved CPUs.
    options -- the policy's own option section, passed on as is.

    Raises ConfigValueError when a value cannot be parsed, available CPUs are
    not online, reserved CPUs are not within the available ones, more CPUs
    are reserved than available, or all available CPUs would be reserved
    (nothing left for the shared pool).
    """
    avail_key, avail_value = _section_value(available, AVAILABLE_KEY)
    avail = parse_available_cpus(avail_value, topology, avail_key)
    res_key, res_value = _section_value(reserved, RESERVED_KEY)
    res = parse_reserved_cpus(res_value, avail, topology, res_key)
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ConfigValueError(f"policy options: expected a mapping, got {short(options)}")
    return PolicyContext(
        topology=topology, available=avail, reserved=res, options=MappingProxyType(dict(options))
    )


def parse_available_cpus(value: Any, topology: Topology, key: str = f"{AVAILABLE_KEY}.CPU") -> CPUSet:
    """The available CPU set; None means all online CPUs."""
    online = topology.online
    if value is None:
        return online
    if not isinstance(value, str):
        raise ConfigValueError(
            f"{key}: expected a cpuset such as 'cpuset:0-7', got {short(value)}"
        )
    cpus = _parse_cpuset(value, key)
    if not cpus:
        raise ConfigValueError(f"{key}: empty cpuset {short(value)}")
    missing = cpus - online
    if missing:
        raise ConfigValueError(f"{key}: CPUs {missing} are not online (online: {online})")
    return cpus


def parse_reserved_cpus(
    value: Any, available: CPUSet, topology: Topology, key: str = f"{RESERVED_KEY}.CPU"
) -> CPUSet:
    """The reserved CPU set (see build_context for the syntax); None means none."""
    if value is None:
        return CPUSet()
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigValueError(f"{key}: expected a CPU count or a cpuset, got {short(value)}")
    if isinstance(value, str) and value.strip().startswith(CPUSET_PREFIX):
        cpus = _parse_cpuset(value, key)
        outside = cpus - available
        if outside:
            raise ConfigValueError(
                f"{key}: CPUs {outside} are not among the available CPUs ({available})"
            )
    else:
        try:
            milli = parse_cpu_milli(value)
        except ValueError as err:
            if isinstance(value, str) and _looks_like_cpuset(value):
                raise ConfigValueError(f"{key}: {short(value)} is not a CPU quantity; a set of CPUs is "
                                       f"written with the prefix, as in {short(CPUSET_PREFIX + value.strip())}") \
                    from None
            raise ConfigValueError(f"{key}: {err}") from None
        count = -(-milli // 1000)
        if count > len(available):
            raise ConfigValueError(
                f"{key}: {count} CPUs reserved but only {len(available)} available ({available})"
            )
        cpus = CPUAllocator(topology).allocate(available, count)
    if cpus == available:
        raise ConfigValueError(
            f"{key}: all available CPUs ({available}) are reserved; none left for the shared pool"
        )
    return cpus


def _section_value(section: Any, section_key: str) -> tuple[str, Any]:
    """(full key name, CPU value) from a resource section or a bare value."""
    if section is None or not isinstance(section, Mapping):
        return f"{section_key}.CPU", section
    value = None
    cpu_key = "CPU"
    for name, item in section.items():
        if isinstance(name, str) and name.lower() == "cpu":
            cpu_key, value = name, item
        else:
            raise ConfigValueError(f"{section_key}.{clip(str(name), 30)}: unknown resource (known: CPU)")
    return f"{section_key}.{cpu_key}", value


def _looks_like_cpuset(text: str) -> bool:
    """A CPU list without its prefix ("0-1", "0,4"): named in the error that refuses it."""
    body = text.strip()
    return "," in body or "-" in body[1:]


def _parse_cpuset(text: str, key: str) -> CPUSet:
    body = text.strip()
    if body.startswith(CPUSET_PREFIX):
        body = body[len(CPUSET_PREFIX):]
    try:
        return CPUSet.parse(body)
    except ValueError as err:
        raise ConfigValueError(f"{key}: {err}") from None
