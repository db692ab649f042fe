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

Unknown names are rejected with the name (policy.topology-aware.NAME), so a typo does
not silently mean the default.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cri_resmgr.bounded import short
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.pools import check_options, option_bool

__all__ = ["NAME", "OPTIONS", "Options", "parse_options"]

NAME = "topology-aware"
OPTIONS = ("PinCPU", "PinMemory", "PreferIsolatedCPUs", "PreferSharedCPUs", "ReservedPoolNamespaces",
           "ColocatePods", "ColocateNamespaces")


@dataclass(frozen=True)
class Options:
    pin_cpu: bool = True
    pin_memory: bool = True
    prefer_isolated: bool = True
    prefer_shared: bool = False
    reserved_namespaces: tuple[str, ...] = ()  # globs, on top of the relay's reserved namespaces
    colocate_pods: bool = False
    colocate_namespaces: bool = False

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
    )


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
