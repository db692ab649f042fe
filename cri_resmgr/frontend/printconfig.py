"""`cri-resmgr -print-config`: the configuration the relay would run with, checked.

The policy is built on this node's hardware, as at start-up, so what start-up would
refuse (reserved CPUs that do not exist, nothing left for the shared pool) is an error
here too. The dump shown is the effective one: the configuration's dump module when it
names rules, else the command line's `-dump` flags; the logger shows `-logger-debug`.
"""

from __future__ import annotations

from typing import Any

import yaml

from cri_resmgr.classes.hostfs import HostRoot
from cri_resmgr.config import Config, Settings
from cri_resmgr.engine.controller import build_policy, check_sections
from cri_resmgr.engine.cpuclasses import CpuClassControl
from cri_resmgr.policy.registry import Registry
from cri_resmgr.topology import Topology, discover


def check(settings: Settings, config: Config, registry: Registry) -> Topology | None:
    """Builds the active policy and checks every other policy section the configuration
    gives on this node's hardware, as start-up would (the relay does this before it
    waits for the runtime, so a bad value exits 2 at once); raises ValueError
    (ConfigError, TopologyError). The topology, when it was needed."""
    info = registry.lookup(config.policy.active or settings.policy)
    topology: list[Topology] = []

    def hardware() -> Topology:
        if not topology:
            topology.append(discover(settings.host_root))
        return topology[-1]

    policy = build_policy(info, config, hardware)
    check_sections(registry, config, info.name, hardware)
    # CPU classes this machine's kernel would refuse (a frequency beyond cpuinfo_max_freq).
    CpuClassControl(HostRoot(settings.host_root)).prepare(policy, hardware, config.source, warn=False)
    return topology[-1] if topology else None


def render(settings: Settings, config: Config, registry: Registry) -> str:
    """The document to print; raises ValueError (ConfigError, TopologyError) when the
    configuration does not fit this node."""
    info = registry.lookup(config.policy.active or settings.policy)
    topology = check(settings, config, registry)
    doc: dict[str, Any] = config.to_document()
    doc["policy"]["Active"] = info.name
    if not config.dump.specs and settings.dump:
        doc["dump"] = {"Config": ",".join(settings.dump), "File": settings.dump_file,
                       "Format": settings.dump_format, "Unredacted": settings.dump_unredacted,
                       "MaxSize": settings.dump_max_size, "From": "command line"}
    elif settings.dump_max_size is not None:
        doc["dump"]["MaxSize"] = settings.dump_max_size
    if settings.logger_debug:
        doc["logger"]["DebugSources"] = sorted(settings.logger_debug)  # -logger-debug, command line
    lines = [f"# effective configuration (source: {config.source})"]
    if topology is not None:
        lines.append(f"# checked against this node: CPUs online {topology.online}")
    lines.append(yaml.safe_dump(doc, sort_keys=False).rstrip())
    return "\n".join(lines)
