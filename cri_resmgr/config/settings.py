"""The relay's settings from the command line (and its option file).

One object for the front end (`Settings`); the engine's controller gets only
its part of it (`EngineSettings`, from `Settings.engine()`), with no sockets or
transport, so that another front end can feed the engine. Each field has the
polarity of its flag (`dump_unredacted` for `-dump-unredacted`), so nothing
is negated between the command line and its readers. The resource-manager
configuration (YAML, from the agent or a file) is a different thing: see
`schema.Config`, which may override the dump and policy settings here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cri_resmgr.config.schema import DumpConfig

DEFAULT_RELAY_SOCKET = "/var/run/cri-resmgr/cri-resmgr.sock"
DEFAULT_RUNTIME_SOCKET = "/var/run/containerd/containerd.sock"
DEFAULT_CONFIG_SOCKET = "/var/run/cri-resmgr/cri-resmgr-config.sock"
DEFAULT_STATE_DIR = "/var/lib/cri-resmgr"
DEFAULT_AGENT_SOCKET = "/var/run/cri-resmgr/cri-resmgr-agent.sock"
DEFAULT_AGENT_EXPORT_INTERVAL = 10.0  # seconds between patches of the Node, at most

DISABLED = "-"  # a socket setting that turns its service off
DEFAULT_RECONCILE_PERIOD = 30.0  # seconds between reconciles with the runtime


@dataclass
class Settings:
    # The active policy unless the configuration's policy.Active names one.
    policy: str = "none"
    # Sockets: where kubelet connects, where the runtime and image services are
    # (DISABLED turns one off), where the agent pushes configurations.
    relay_socket: str = DEFAULT_RELAY_SOCKET
    runtime_socket: str = DEFAULT_RUNTIME_SOCKET
    image_socket: str = DEFAULT_RUNTIME_SOCKET
    config_socket: str = DEFAULT_CONFIG_SOCKET
    relay_transport: str = "auto"  # "h2", "grpc", or "auto": h2 when there is one upstream socket
    runtime_wait_timeout: float | None = None  # None: wait forever
    metrics_address: str = ""  # HOST:PORT; empty: no metrics (nor /healthz, /readyz)
    reconcile_period: float = DEFAULT_RECONCILE_PERIOD  # 0: never reconcile after start-up
    # The node agent's Agent service, used to publish the node's CPUs on its Node (DISABLED: not used),
    # at most once per agent_export_interval seconds (0: not published).
    agent_socket: str = DEFAULT_AGENT_SOCKET
    agent_export_interval: float = DEFAULT_AGENT_EXPORT_INTERVAL
    # Dumping, until a configuration's dump module replaces it.
    dump: tuple[str, ...] = ()
    dump_file: str | None = None
    dump_format: str = "human"
    dump_unredacted: bool = False
    dump_max_size: int | None = None  # bytes; the file is rotated to FILE.1 past it
    # Logging: the -logger-debug sources ('*' or names of logsetup.SOURCES); empty: none.
    logger_debug: frozenset[str] = frozenset()
    # The engine.
    state_dir: str = DEFAULT_STATE_DIR
    host_root: str = "/"
    force_config: str | None = None
    fallback_config: str | None = None
    dry_run: bool = False
    disable_policy_switch: bool = False

    def engine(self) -> EngineSettings:
        """The part of these settings the engine's controller uses."""
        return EngineSettings(
            policy=self.policy, state_dir=self.state_dir, host_root=self.host_root,
            force_config=self.force_config, fallback_config=self.fallback_config, dry_run=self.dry_run,
            disable_policy_switch=self.disable_policy_switch,
            dump=DumpConfig(specs=tuple(self.dump), file=self.dump_file, format=self.dump_format,
                            unredacted=self.dump_unredacted))


@dataclass(frozen=True)
class EngineSettings:
    """What the engine's controller needs of the settings; the fields mean what
    `Settings`' fields of the same names mean."""

    policy: str = "none"
    state_dir: str = DEFAULT_STATE_DIR
    host_root: str = "/"
    force_config: str | None = None
    fallback_config: str | None = None
    dry_run: bool = False
    disable_policy_switch: bool = False
    # The dump flags, as a configuration's dump module would give them; that
    # module, when it names any specs, replaces them.
    dump: DumpConfig = field(default_factory=DumpConfig)
