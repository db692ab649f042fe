"""The name-keyed table of policies. Adding a policy means adding one entry here."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from cri_resmgr.bounded import short
from cri_resmgr.errors import CriResmgrError
from cri_resmgr.policy.api import Policy, PolicyContext


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    description: str
    # Builds the policy's decision object; None means the policy decides nothing
    # and the relay intercepts nothing (pure passthrough).
    factory: Callable[[PolicyContext], Policy] | None
    aliases: tuple[str, ...] = field(default=())


class UnknownPolicy(CriResmgrError, ValueError):
    pass


class Registry:
    def __init__(self, policies: list[PolicyInfo]):
        table: dict[str, PolicyInfo] = {}
        for p in policies:
            for name in (p.name, *p.aliases):
                if name in table:
                    raise ValueError(f"policy name {name!r} registered twice")
                table[name] = p
        self._table: Mapping[str, PolicyInfo] = MappingProxyType(table)
        self._policies = tuple(policies)

    def lookup(self, name: str) -> PolicyInfo:
        try:
            return self._table[name]
        except KeyError:
            raise UnknownPolicy(f"unknown policy {short(name)} (available: {', '.join(self.names())})") from None

    def names(self) -> list[str]:
        return sorted(self._table)

    def __iter__(self) -> Iterator[PolicyInfo]:
        return iter(self._policies)

    def describe(self) -> str:
        lines = []
        for p in self._policies:
            names = p.name + (f" (alias: {', '.join(p.aliases)})" if p.aliases else "")
            lines.append(f"{names:<24} {p.description}")
        return "\n".join(lines)


def default_registry() -> Registry:
    # Imported here so that reading the table does not drag every policy in at import time.
    from cri_resmgr.policy import balloons, static, static_plus
    from cri_resmgr.policy.topology_aware import policy as topology_aware

    return Registry([
        PolicyInfo("none", "no policy: every call is relayed unchanged (CRI message dumper mode)",
                   None, aliases=("null",)),
        PolicyInfo(static.NAME, static.DESCRIPTION, static.factory),
        PolicyInfo(static_plus.NAME, static_plus.DESCRIPTION, static_plus.factory),
        PolicyInfo(topology_aware.NAME, topology_aware.DESCRIPTION, topology_aware.factory),
        PolicyInfo(balloons.NAME, balloons.DESCRIPTION, balloons.factory),
    ])
