"""The topology-aware policy's own configuration section, checked.

    policy:
      Active: topology-aware
      topology-aware:
        PinCPU: true
        PinMemory: true
        PreferIsolatedCPUs: true
        PreferSharedCPUs: false
        ReservedPoolNamespaces: [kube-system, "monitoring-*"]
        ColocatePods: false
        ColocateNamespaces: false
        UnlimitedBurstable: package   # Burstable without a CPU limit: no lower than this level
        CPUClasses: [{Name: turbo, MinFreq: 3000000}]   # policy/cpuclasses.py, docs/classes.md
        DefaultExclusiveCPUClass: turbo
        SharedPoolCPUClass: ""
        ReservedPoolCPUClass: ""

Unknown names are rejected with the name (policy.topology-aware.NAME), so a typo does
not silently mean the default.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cri_resmgr.bounded import short
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import LAYOUT_KEYS, CpuClassLayout, parse_layout
from cri_resmgr.policy.pools import check_options, option_bool
from cri_resmgr.policy.tuning import TUNING_OPTIONS

__all__ = ["NAME", "OPTIONS", "Options", "parse_options", "parse_level", "LEVEL_NAMES", "DEFAULT_UNLIMITED_BURSTABLE"]

NAME = "topology-aware"
OPTIONS = ("PinCPU", "PinMemory", "PreferIsolatedCPUs", "PreferSharedCPUs", "ReservedPoolNamespaces",
           "ColocatePods", "ColocateNamespaces", "UnlimitedBurstable", *LAYOUT_KEYS, *TUNING_OPTIONS)
# Names of a tree level (the lowest level a Burstable container without a CPU limit may
# be placed at); None: any level. nri-plugins' names (system, package, die, numa) and ours.
LEVEL_NAMES: dict[str, str | None] = {
    "true": "root", "system": "root", "root": "root", "package": "package", "socket": "package",
    "die": "die", "node": "node", "numa": "node", "l3": "l3", "l3cache": "l3", "false": None, "none": None}
DEFAULT_UNLIMITED_BURSTABLE = "package"  # nri-plugins' default


@dataclass(frozen=True)
class Options:
    pin_cpu: bool = True
    pin_memory: bool = True
    prefer_isolated: bool = True
    prefer_shared: bool = False
    reserved_namespaces: tuple[str, ...] = ()  # globs, on top of the relay's reserved namespaces
    colocate_pods: bool = False
    colocate_namespaces: bool = False
    unlimited_burstable: str | None = DEFAULT_UNLIMITED_BURSTABLE
    cpu_classes: CpuClassLayout = CpuClassLayout()  # CPUClasses and the pools' classes (without CPUs)

    def reserved_namespace(self, namespace: str) -> bool:
        return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in self.reserved_namespaces)


def parse_options(options: Mapping[str, object]) -> Options:
    check_options(options, OPTIONS, NAME)
    return Options(
        pin_cpu=option_bool(options, "PinCPU", NAME, True),
        pin_memory=option_bool(options, "PinMemory", NAME, True),
        prefer_isolated=option_bool(options, "PreferIsolatedCPUs", NAME, True),
        prefer_shared=option_bool(options, "PreferSharedCPUs", NAME, False),
        reserved_namespaces=_namespaces(options.get("ReservedPoolNamespaces")),
        colocate_pods=option_bool(options, "ColocatePods", NAME, False),
        colocate_namespaces=option_bool(options, "ColocateNamespaces", NAME, False),
        unlimited_burstable=_level(options.get("UnlimitedBurstable", DEFAULT_UNLIMITED_BURSTABLE)),
        cpu_classes=parse_layout(options, NAME),
    )


def parse_level(value: str, where: str, error: type[ValueError]) -> str | None:
    """The tree level a name means (None: no restriction); `error` names `where`."""
    text = value.strip().lower()
    if text == "":
        return None
    if text not in LEVEL_NAMES:
        raise error(f"{where}: unknown level {short(value)} (one of {', '.join(sorted(LEVEL_NAMES))})")
    return LEVEL_NAMES[text]


def _level(value: object) -> str | None:
    key = f"policy.{NAME}.UnlimitedBurstable"
    if isinstance(value, bool):  # YAML's false / true
        value = "true" if value else "false"
    if not isinstance(value, str):
        raise ConfigValueError(f"{key}: expected a level name (system, package, die, numa, l3), got {short(value)}")
    return parse_level(value, key, ConfigValueError)


def _namespaces(value: object) -> tuple[str, ...]:
    key = f"policy.{NAME}.ReservedPoolNamespaces"
    if value is None:
        return ()
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigValueError(f"{key}: expected a list of namespaces, got {short(value)}")
    out = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ConfigValueError(f"{key}: expected namespace names (globs allowed), got {short(item)}")
        out.append(item.strip())
    return tuple(out)
