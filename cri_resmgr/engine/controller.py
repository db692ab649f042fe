"""Owns the relay's live parts and applies configurations transactionally.

A configuration is validated and everything it needs is built first (policy,
dumper); only then is it switched in. If any step fails, what was in force
stays in force and the error names what was wrong.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.config import Config, ConfigError, Settings, parse_document, parse_modules, sources
from cri_resmgr.engine import adopt
from cri_resmgr.engine.cache import Cache
from cri_resmgr.engine.enforce import Enforcer
from cri_resmgr.engine.resmgr import Options, ResourceManager
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import Registry
from cri_resmgr.topology import Topology, discover
from cri_resmgr.transport.contract import Transport
from cri_resmgr.transport.upstream import Upstream

log = logging.getLogger(__name__)


class Controller:
    """Builds the resource manager, policy and dumper a configuration asks for,
    and swaps them into the transport."""

    def __init__(self, settings: Settings, registry: Registry, relay: Transport, runtime: Upstream,
                 dumper_factory: Callable[..., Any], logger_setter: Callable[[bool], None] | None = None):
        self.settings = settings
        self.registry = registry
        self.relay = relay
        self.runtime = runtime
        self._make_dumper = dumper_factory
        self._set_debug = logger_setter
        self._topology: Topology | None = None
        self.config: Config | None = None
        self.policy_name = "none"
        self.resmgr: ResourceManager | None = None
        self.dumper = None
        self.enforcer: Enforcer | None = None
        self._apply_lock = asyncio.Lock()
        self._policy_key: tuple | None = None

    # -- sources ----------------------------------------------------------------------

    def initial_config(self) -> Config:
        return sources.initial_config(self.settings, self.registry.names())

    # -- applying -------------------------------------------------------------------------

    async def apply_agent(self, modules: dict[str, str], source: str = "agent") -> str | None:
        """The Config service's entry: None when accepted, else the error text."""
        if self.settings.force_config:
            return (f"configuration is forced from {self.settings.force_config} (-force-config); "
                    "agent configuration ignored")
        try:
            if modules:
                await self.apply(parse_modules(modules, source, self.registry.names()))
            else:  # no ConfigMap applies to this node: what the relay uses without an agent
                await self.apply(sources.without_agent(self.settings, self.registry.names()))
        except ConfigError as e:
            log.error("rejected configuration from %s: %s", source, e)
            return str(e)
        sources.remember_agent_config(self.settings, modules)
        return None

    async def reload_forced(self) -> None:
        """SIGHUP: re-read -force-config; a bad file keeps the current configuration."""
        path = self.settings.force_config
        if not path:
            log.info("SIGHUP: no -force-config file to reload")
            return
        try:
            await self.apply(parse_document(sources.read_config_file(path), path, self.registry.names()))
            log.info("SIGHUP: reloaded %s", path)
        except ConfigError as e:
            log.error("SIGHUP: keeping the current configuration: %s", e)

    async def apply(self, config: Config) -> None:
        async with self._apply_lock:
            await self._apply(config)

    async def _apply(self, config: Config) -> None:
        name = config.policy.active or self.settings.policy
        info = self.registry.lookup(name)
        if (self.config is not None and self.settings.disable_policy_switch
                and info.name != self.policy_name):
            raise ConfigError(f"{config.source}: policy.Active: switching from {self.policy_name} to "
                              f"{info.name} is disabled (-disable-policy-switch)")
        # Build everything first; nothing in force changes until all of it is ready.
        policy = None
        policy_key = (info.name, config.policy.reserved_cpu, config.policy.available_cpu,
                      json.dumps(config.policy.sections.get(info.name, {}), sort_keys=True, default=str),
                      config.policy.reserved_namespaces, config.policy.fail_closed)
        if info.factory is not None and policy_key != self._policy_key:
            try:
                context = build_context(self.topology(), available=config.policy.available_cpu,
                                        reserved=config.policy.reserved_cpu,
                                        options=config.policy.sections.get(info.name, {}))
                policy = info.factory(context)
            except ValueError as e:  # ConfigValueError and the like: the configuration is wrong
                raise ConfigError(f"{config.source}: {e}") from None
            # Anything else (a TypeError above all) is a bug in the policy and propagates
            # as one, rather than being reported as a rejected configuration.
        dump_cfg = self._dump_settings(config)
        new_dumper = self.dumper
        if self.config is None or dump_cfg != self._dump_settings(self.config):
            try:
                new_dumper = self._make_dumper(*dump_cfg) if dump_cfg[0] else None
            except (OSError, ValueError) as e:
                raise ConfigError(f"{config.source}: dump: {e}") from None

        if policy_key != self._policy_key:
            try:
                await self._switch_policy(info.name, policy, config)
            except Exception as e:
                if new_dumper is not self.dumper and new_dumper is not None:
                    new_dumper.close()
                raise ConfigError(f"{config.source}: applying policy {info.name} failed: {e}") from e
            self._policy_key = policy_key
        if new_dumper is not self.dumper:
            old = self.dumper
            self.dumper = new_dumper
            self.relay.reconfigure(dumper=new_dumper)
            if old is not None:
                old.close()
        if self._set_debug:
            self._set_debug(config.logger.debug)
        self.config = config
        log.info("configuration from %s in force: policy %s", config.source, self.policy_name)

    def _dump_settings(self, config: Config) -> tuple:
        d = config.dump
        if d.specs:
            return (list(d.specs), d.file, d.format, not d.unredacted)
        s = self.settings
        return (list(s.dump), s.dump_file, s.dump_format, not s.dump_unredacted)

    def topology(self) -> Topology:
        if self._topology is None:
            self._topology = discover(self.settings.host_root)
        return self._topology

    async def _switch_policy(self, name: str, policy, config: Config) -> None:
        old = self.resmgr
        if policy is None:  # the none policy: intercept nothing, give containers all CPUs back
            if old is not None:
                async with old.lock:
                    await self._reset_all(old)
                old.retire()
            self.resmgr = None
            self.policy_name = name
            self.relay.reconfigure(interceptors={})
            return
        if self.enforcer is None:
            self.enforcer = Enforcer(self.runtime)
        lock = old.lock if old is not None else asyncio.Lock()
        async with lock:
            if old is not None:
                cache, saved = old.cache, old.policy.assignments() if old.policy_name == name else None
            else:
                cache = Cache(self.settings.state_dir)
                loaded = cache.load()
                saved = loaded.assignments if loaded is not None and loaded.policy == name else None
                if loaded is not None and loaded.policy != name:
                    log.info("policy changed from %s to %s since the last run: re-allocating every container",
                             loaded.policy, name)
                await adopt.adopt(self.runtime, cache, config.policy.reserved_namespaces)
            options = Options(dry_run=self.settings.dry_run, fail_closed=config.policy.fail_closed,
                              reserved_namespaces=config.policy.reserved_namespaces)
            resmgr = ResourceManager(name, policy, cache, self.enforcer, options, note=self._note)
            resmgr.lock = lock
            if old is not None:
                old.retire()
            resmgr.restore(saved)
            self.resmgr = resmgr
            self.policy_name = name
            self.relay.reconfigure(interceptors=resmgr.interceptors())

    async def _reset_all(self, old: ResourceManager) -> None:
        cpus = str(self.topology().online)
        for c in old.cache:
            if c.id and not c.released and self.enforcer is not None and not self.settings.dry_run:
                self.enforcer.submit(c.id, pb.LinuxContainerResources(cpuset_cpus=cpus))

    def _note(self, text: str) -> None:
        if self.dumper is not None:
            self.dumper.note(text)

    async def close(self) -> None:
        if self.resmgr is not None:
            await self.resmgr.close()
        if self.enforcer is not None:
            await self.enforcer.close()
        if self.dumper is not None:
            self.dumper.close()
            self.dumper = None

