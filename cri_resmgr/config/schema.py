"""Parses and validates configuration documents into typed, immutable values.

A document is a YAML mapping of modules; the agent sends the same modules as a
ConfigMap's data (module name -> YAML text). Unknown keys are errors that name
the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from cri_resmgr.bounded import InputError, clip, load_yaml, short
from cri_resmgr.config.classes import BlockioConfig, ClassConfigError, RdtConfig, parse_blockio, parse_rdt
from cri_resmgr.errors import CriResmgrError

# Pods in these namespaces (globs) run on the reserved CPUs (policy.ReservedPoolNamespaces).
DEFAULT_RESERVED_NAMESPACES: tuple[str, ...] = ("kube-system",)


class ConfigError(CriResmgrError, ValueError):
    pass


T = TypeVar("T")


@dataclass(frozen=True)
class PolicyConfig:
    active: str | None = None  # None: the -policy flag decides
    reserved_cpu: Any = None  # a count, a quantity string, or a cpuset (see policy.context)
    available_cpu: str | None = None
    reserved_namespaces: tuple[str, ...] = DEFAULT_RESERVED_NAMESPACES
    fail_closed: bool = False
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per-policy options


@dataclass(frozen=True)
class DumpConfig:
    specs: tuple[str, ...] = ()
    file: str | None = None
    format: str = "human"
    unredacted: bool = False


@dataclass(frozen=True)
class LoggerConfig:
    debug: bool = False


@dataclass(frozen=True)
class Config:
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    dump: DumpConfig = field(default_factory=DumpConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    blockio: BlockioConfig = field(default_factory=BlockioConfig)  # block I/O classes (config/classes.py)
    rdt: RdtConfig = field(default_factory=RdtConfig)  # RDT classes (config/classes.py)
    source: str = "defaults"

    def to_document(self) -> dict[str, Any]:
        """The effective configuration as a document (for -print-config)."""
        p = self.policy
        policy: dict[str, Any] = {"Active": p.active, "ReservedPoolNamespaces": list(p.reserved_namespaces),
                                  "FailClosed": p.fail_closed}
        if p.reserved_cpu is not None:
            policy["ReservedResources"] = {"CPU": p.reserved_cpu}
        if p.available_cpu is not None:
            policy["AvailableResources"] = {"CPU": p.available_cpu}
        policy.update({k: dict(v) for k, v in p.sections.items()})
        return {
            "policy": policy,
            "dump": {"Config": ",".join(self.dump.specs), "File": self.dump.file,
                     "Format": self.dump.format, "Unredacted": self.dump.unredacted},
            "logger": {"Debug": self.logger.debug},
            "blockio": self.blockio.to_document(),
            "rdt": self.rdt.to_document(),
        }


MODULES = ("policy", "dump", "logger", "blockio", "rdt")


def parse_document(text: str, source: str, policy_names: Iterable[str]) -> Config:
    """A whole YAML document (the -force-config / -fallback-config file)."""
    try:
        data = load_yaml(text, source) if text.strip() else {}
    except InputError as e:  # an alias bomb, deep nesting, a number of 5000 digits: says where
        raise ConfigError(str(e)) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: invalid YAML: {_yaml_problem(e)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of modules ({', '.join(MODULES)})")
    return _build(data, source, policy_names)


def parse_modules(modules: Mapping[str, str], source: str, policy_names: Iterable[str]) -> Config:
    """Module name -> YAML text, as in a ConfigMap's data."""
    data: dict[str, Any] = {}
    for name, text in modules.items():
        try:
            data[name] = load_yaml(text, f"{source}: module {name}") if text and text.strip() else {}
        except InputError as e:
            raise ConfigError(str(e)) from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{source}: module {name}: invalid YAML: {_yaml_problem(e)}") from None
    return _build(data, source, policy_names)


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = clip(str(getattr(e, "problem", None) or e), 120)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


def _build(data: Mapping[str, Any], source: str, policy_names: Iterable[str]) -> Config:
    _keys(data, MODULES, source, "")
    names = set(policy_names)
    return Config(
        policy=_policy(_section(data, "policy", source), source, names),
        dump=_dump(_section(data, "dump", source), source),
        logger=_logger(_section(data, "logger", source), source),
        blockio=_classes(parse_blockio, _section(data, "blockio", source), source),
        rdt=_classes(parse_rdt, _section(data, "rdt", source), source),
        source=source,
    )


def _classes(parse: Callable[[Mapping[str, Any]], T], data: Mapping[str, Any], source: str) -> T:
    try:
        return parse(data)
    except ClassConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def _section(data: Mapping[str, Any], name: str, source: str) -> Mapping[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {name}: expected a mapping, got {type(value).__name__}")
    return value


def _keys(data: Mapping[str, Any], allowed: Iterable[str], source: str, where: str) -> None:
    allowed = tuple(allowed)
    for k in data:
        if k not in allowed:
            # A misspelling gets a guess, as a misspelled flag does; the list stays after it.
            near = difflib.get_close_matches(str(k), allowed, n=1) if len(str(k)) <= 100 else []
            guess = f"did you mean {near[0]}? " if near else ""
            raise ConfigError(f"{source}: {where}{clip(str(k), 30)}: unknown key ({guess}known: {', '.join(allowed)})")


def _bool(value: Any, source: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{source}: {where}: expected true or false, got {short(value)}")


def _policy(p: Mapping[str, Any], source: str, names: set[str]) -> PolicyConfig:
    fixed = ("Active", "ReservedResources", "AvailableResources", "ReservedPoolNamespaces", "FailClosed")
    _keys(p, fixed + tuple(sorted(names)), source, "policy.")
    active = p.get("Active")
    if active is not None:
        if not isinstance(active, str) or active not in names:
            raise ConfigError(f"{source}: policy.Active: unknown policy {short(active)} "
                              f"(available: {', '.join(sorted(names))})")
    reserved = available = None
    for key in ("ReservedResources", "AvailableResources"):
        sub = p.get(key) or {}
        if not isinstance(sub, dict):
            raise ConfigError(f"{source}: policy.{key}: expected a mapping like {{CPU: ...}}")
        _keys(sub, ("CPU",), source, f"policy.{key}.")
        value = sub.get("CPU")
        if value is not None and not isinstance(value, (int, str)) or isinstance(value, bool):
            raise ConfigError(f"{source}: policy.{key}.CPU: expected a number or a cpuset, got {short(value)}")
        if key == "ReservedResources":
            reserved = value
        else:
            available = str(value) if value is not None else None
    namespaces = p.get("ReservedPoolNamespaces", list(DEFAULT_RESERVED_NAMESPACES))
    if not isinstance(namespaces, list) or not all(isinstance(n, str) and n for n in namespaces):
        raise ConfigError(f"{source}: policy.ReservedPoolNamespaces: expected a list of namespace globs")
    sections = {}
    for name in names:
        if name in p:
            sub = p[name] if p[name] is not None else {}
            if not isinstance(sub, dict):
                raise ConfigError(f"{source}: policy.{name}: expected a mapping of options")
            sections[name] = dict(sub)
    return PolicyConfig(active=active, reserved_cpu=reserved, available_cpu=available,
                        reserved_namespaces=tuple(namespaces),
                        fail_closed=_bool(p.get("FailClosed", False), source, "policy.FailClosed"),
                        sections=sections)


def _dump(d: Mapping[str, Any], source: str) -> DumpConfig:
    _keys(d, ("Config", "File", "Format", "Unredacted"), source, "dump.")
    spec = d.get("Config", "")
    if isinstance(spec, list):
        specs = tuple(str(s) for s in spec)
    elif isinstance(spec, str):
        specs = (spec,) if spec else ()
    else:
        raise ConfigError(f"{source}: dump.Config: expected a dump spec string or a list of them")
    fmt = d.get("Format", "human")
    if fmt not in ("human", "jsonl"):
        raise ConfigError(f"{source}: dump.Format: expected human or jsonl, got {short(fmt)}")
    file = d.get("File")
    if file is not None and not isinstance(file, str):
        raise ConfigError(f"{source}: dump.File: expected a path")
    from cri_resmgr.dump.rules import DumpSpecError, parse_specs

    try:
        parse_specs(list(specs))
    except DumpSpecError as e:
        raise ConfigError(f"{source}: dump.Config: {e}") from None
    return DumpConfig(specs=specs, file=file or None, format=fmt,
                      unredacted=_bool(d.get("Unredacted", False), source, "dump.Unredacted"))


def _logger(d: Mapping[str, Any], source: str) -> LoggerConfig:
    _keys(d, ("Debug",), source, "logger.")
    return LoggerConfig(debug=_bool(d.get("Debug", False), source, "logger.Debug"))
