"""The `cri-resmgr` command line: Go-style flags (cri_resmgr.flags), and an option file."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from cri_resmgr import __version__, flags
from cri_resmgr.config import Settings
from cri_resmgr.config.options import OptionFileError, expand_config
from cri_resmgr.config.settings import (
    DEFAULT_AGENT_EXPORT_INTERVAL,
    DEFAULT_AGENT_SOCKET,
    DEFAULT_CONFIG_SOCKET,
    DEFAULT_RECONCILE_PERIOD,
    DEFAULT_RELAY_SOCKET,
    DEFAULT_RUNTIME_SOCKET,
    DEFAULT_STATE_DIR,
)
from cri_resmgr.config.sources import initial_config
from cri_resmgr.frontend import health, logsetup, printconfig
from cri_resmgr.policy.registry import Registry, UnknownPolicy, default_registry
from cri_resmgr.relay import app
from cri_resmgr.status import command as status
from cri_resmgr.topology import TopologyError, discover
from cri_resmgr.topology.render import render_json, render_text
from cri_resmgr.transport import eventloop

PROG = "cri-resmgr"

POLICY = flags.text("policy", "NAME", "Active resource policy (see -list-policies).", "none")
LIST_POLICIES = flags.switch("list-policies", "List the available policies and exit.")
RELAY_SOCKET = flags.text("relay-socket", "PATH", "Socket the relay serves CRI on (point kubelet's "
                          "--container-runtime-endpoint here).", DEFAULT_RELAY_SOCKET)
RUNTIME_SOCKET = flags.text("runtime-socket", "PATH", "Runtime service socket to relay to; '-' disables the "
                            "runtime service.", DEFAULT_RUNTIME_SOCKET)
IMAGE_SOCKET = flags.text("image-socket", "PATH", "Image service socket; default: the runtime socket; '-' "
                          "disables the image service.", None)
RELAY_TRANSPORT = flags.choice(
    "relay-transport", "How calls are relayed: 'h2' passes HTTP/2 frames through (fast; one runtime socket), "
    "'grpc' relays each call through gRPC; 'auto' is h2 unless the image socket is separate.",
    ("auto", "h2", "grpc"), "auto")
DUMP = flags.repeated("dump", "SPEC", "Dump rules, e.g. 'reset,full:.*' or 'name:List.*,count:Version' "
                      "(repeatable).")
DUMP_FILE = flags.text("dump-file", "PATH", "Write the dump here (mode 0600) instead of stderr.", None)
DUMP_FORMAT = flags.choice("dump-format", "Dump format.", ("human", "jsonl"), "human")
DUMP_MAX_SIZE = flags.option("dump-max-size", "BYTES", "Cap the dump file: past this size it is renamed to "
                             "FILE.1 and a new one started. The dump file is reopened on SIGHUP (logrotate).",
                             None, flags.integer(low=1))
DUMP_UNREDACTED = flags.switch("dump-unredacted", "Do not mask secret-looking environment variables in dumps.")
CONFIG_SOCKET = flags.text("config-socket", "PATH", "Socket for the node agent's configuration pushes; '-' "
                           "disables it.", DEFAULT_CONFIG_SOCKET)
AGENT_SOCKET = flags.text("agent-socket", "PATH", "The node agent's Agent service, used to publish this "
                          "node's free exclusive CPUs and pools on its Node; '-' disables it.", DEFAULT_AGENT_SOCKET)
AGENT_EXPORT_INTERVAL = flags.option("agent-export-interval", "SECONDS", "Publish changes on the Node at most "
                                     "this often; 0 disables publishing.", DEFAULT_AGENT_EXPORT_INTERVAL,
                                     flags.number(low=0))
STATE_DIR = flags.text("state-dir", "DIR", "Where allocations and the last agent configuration are kept "
                       "across restarts.", DEFAULT_STATE_DIR)
HOST_ROOT = flags.text("host-root", "DIR", "Root under which sysfs is read for the hardware topology.", "/")
FORCE_CONFIG = flags.text("force-config", "FILE", "Resource-manager configuration (YAML) used as is; the agent "
                          "is ignored; re-read on SIGHUP.", None)
FALLBACK_CONFIG = flags.text("fallback-config", "FILE", "Resource-manager configuration (YAML) used when no "
                             "agent configuration is known.", None)
PRINT_CONFIG = flags.switch("print-config", "Print the effective configuration and exit.")
DRY_RUN = flags.switch("dry-run", "Decide and log ('would set ...') but relay requests unchanged and send no "
                       "updates.")
DISABLE_POLICY_SWITCH = flags.switch("disable-policy-switch", "Refuse configurations that change the active "
                                     "policy while running.")
RUNTIME_WAIT_TIMEOUT = flags.option("runtime-wait-timeout", "SECONDS", "Give up if the runtime is not ready in "
                                    "this time (default: wait forever).", None, flags.number(low=0))
METRICS_ADDRESS = flags.text("metrics-address", "HOST:PORT", "Serve Prometheus metrics (/metrics) and health "
                             "(/healthz, /readyz) on this address (e.g. 127.0.0.1:8888; ':8888' is 127.0.0.1:8888); "
                             "default: off.", "")
PROBE = flags.switch("probe", "Ask the relay at -metrics-address (default for this: 127.0.0.1:8888, as "
                     "`cri-resmgr status`) whether it is ready (/readyz); one line, exit 0 if so, 1 if not.")
RECONCILE_PERIOD = flags.option("reconcile-period", "SECONDS", "Reconcile with the runtime this often (one "
                                "ListContainers): release the CPUs of containers removed behind the relay's back, "
                                "adopt unknown ones; 0 disables.", DEFAULT_RECONCILE_PERIOD, flags.number(low=0))
LOG_FORMAT = flags.log_format()
# Read by expand_config before parsing; here for -help.
CONFIG = flags.text("config", "FILE", "Option file: these options, one per line, without leading dashes.", None)
LOGGER_DEBUG = flags.option("logger-debug", "SOURCES", "Debug logging for '*' (all of cri-resmgr's) or a "
                            "comma-separated list of sources: " + ", ".join(sorted(logsetup.SOURCES)) +
                            "; alone, '*'. grpc and asyncio stay at INFO.", frozenset[str](),
                            logsetup.parse_sources)

COMMAND = flags.Command(
    PROG,
    "CRI relay and node resource manager. Sits between kubelet and the container runtime, relays every CRI "
    "call and applies the active resource policy to the calls it intercepts.",
    (POLICY, LIST_POLICIES, RELAY_SOCKET, RUNTIME_SOCKET, IMAGE_SOCKET, RELAY_TRANSPORT, DUMP, DUMP_FILE,
     DUMP_FORMAT, DUMP_MAX_SIZE, DUMP_UNREDACTED, CONFIG_SOCKET, AGENT_SOCKET, AGENT_EXPORT_INTERVAL, STATE_DIR,
     HOST_ROOT, FORCE_CONFIG,
     FALLBACK_CONFIG, PRINT_CONFIG, DRY_RUN, DISABLE_POLICY_SWITCH, RUNTIME_WAIT_TIMEOUT, METRICS_ADDRESS, PROBE,
     RECONCILE_PERIOD, CONFIG, LOGGER_DEBUG, LOG_FORMAT),
    version=__version__,
)


# `cri-resmgr topology`: what the relay believes about the node, for an operator to check.
TOPOLOGY_OUTPUT = flags.choice("o", "Output format: a text picture, or JSON for tools.", ("text", "json"), "text")
TOPOLOGY = flags.Command(
    f"{PROG} topology",
    "Print the hardware topology as discovered under the host root: packages, dies, NUMA nodes, caches, "
    "cores and threads, memory per node, offline and isolated CPUs, and what discovery left out.",
    (HOST_ROOT, TOPOLOGY_OUTPUT),
)


# The subcommands, for -help and `cri-resmgr help X`.
SUBCOMMANDS = (
    ("topology", "the hardware topology as the relay discovers it"),
    ("status", "what a running relay decided: CPUs, pools, containers (text, JSON, SVG)"),
    ("simulate", "a policy with no runtime, on a described machine and workload"),
    ("replay", "a recorded CRI session sent to a runtime again"),
    ("help", "`cri-resmgr help COMMAND`: that command's flags"),
)


def _help_with_subcommands() -> str:
    lines = COMMAND.help().splitlines()
    width = max(len(name) for name, _ in SUBCOMMANDS)
    extra = ["", f"usage: {PROG} COMMAND [flags]   (each has -help)"] + \
        [f"  {name.ljust(width)}  {what}" for name, what in SUBCOMMANDS]
    return "\n".join(lines[:1] + extra + lines[1:])


def _help(args: list[str]) -> int:
    """`cri-resmgr help [COMMAND]`: COMMAND's -help, the relay's without one."""
    if not args:
        return flags.emit(_help_with_subcommands())
    if args[0] not in {name for name, _ in SUBCOMMANDS} - {"help"} or len(args) > 1:
        return COMMAND.report(flags.UsageError(
            f"help: no such command: {' '.join(args)} (commands: {', '.join(n for n, _ in SUBCOMMANDS[:-1])})"))
    main([args[0], "-help"])  # exits with that command's code
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point. Usage errors are one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["help"]:
        sys.exit(_help(args[1:]))
    if args and args[0] in ("-h", "-help", "--help") and len(args) == 1:
        sys.exit(flags.emit(_help_with_subcommands()))
    if args[:1] == ["topology"]:
        sys.exit(TOPOLOGY.run(args[1:], _topology))
    if args[:1] == ["status"]:  # what a running relay decided (cri_resmgr/status/)
        sys.exit(status.main(args[1:]))
    if args[:1] == ["simulate"]:  # a policy with no runtime (cri_resmgr/simulate/)
        from cri_resmgr.simulate import command as simulate

        sys.exit(simulate.main(args[1:]))
    if args[:1] == ["replay"]:  # a recorded CRI session, sent to a runtime again
        from cri_resmgr.simulate import replay_command

        sys.exit(replay_command.main(args[1:]))
    try:
        args = logsetup.debug_flag_value(expand_config(args, {f.name for f in COMMAND.flags}, path_flags(COMMAND)),
                                         LOGGER_DEBUG.name)
    except OptionFileError as e:
        sys.exit(COMMAND.report(flags.UsageError(str(e))))
    sys.exit(COMMAND.run(args, _run))


def path_flags(command: flags.Command) -> set[str]:
    """The flags whose values are paths: relative ones in an option file are the file's."""
    return {f.name for f in command.flags if f.metavar in ("PATH", "FILE", "DIR")}


def _run(values: flags.Values) -> int:
    registry = default_registry()
    if values[LIST_POLICIES]:
        print(registry.describe())
        return 0
    if values[PROBE]:  # the same default address as `cri-resmgr status`
        ready, reason = health.probe(values[METRICS_ADDRESS] or status.DEFAULT_ADDRESS)
        print(("ready: " if ready else "not ready: ") + reason, file=sys.stdout if ready else sys.stderr)
        return 0 if ready else 1
    settings = _settings(values, registry)
    try:
        app.validate(settings)
        config = initial_config(settings, registry.names())
        if values[PRINT_CONFIG]:
            print(printconfig.render(settings, config, registry))
            return 0
        # Before the runtime is waited for: a configuration that cannot work here exits 2 now.
        printconfig.check(settings, config, registry)
    except ValueError as e:  # ConfigError, DumpSpecError and TopologyError are ValueErrors
        raise flags.UsageError(str(e)) from None
    debug = logsetup.setup(settings.logger_debug, values[LOG_FORMAT])
    return eventloop.run(app.run(settings, registry, debug.set_config_debug))


def _topology(values: flags.Values) -> int:
    try:
        topo = discover(values[HOST_ROOT])
    except TopologyError as e:
        raise flags.CommandError(str(e)) from None
    print(render_json(topo) if values[TOPOLOGY_OUTPUT] == "json" else render_text(topo))
    return 0


def _settings(values: flags.Values, registry: Registry) -> Settings:
    """The flags as Settings, after the checks that need no configuration."""
    try:
        registry.lookup(values[POLICY])
    except UnknownPolicy as e:
        raise flags.UsageError(f"invalid value for -policy: {e}") from None
    for flag in (FORCE_CONFIG, FALLBACK_CONFIG):
        path = values[flag]
        if path is not None and not os.access(path, os.R_OK):
            raise flags.UsageError(f"invalid value for -{flag.name}: cannot read {path}")
    image_socket = values[IMAGE_SOCKET]
    return Settings(
        policy=values[POLICY],
        relay_socket=values[RELAY_SOCKET],
        runtime_socket=values[RUNTIME_SOCKET],
        image_socket=image_socket if image_socket is not None else values[RUNTIME_SOCKET],
        config_socket=values[CONFIG_SOCKET],
        agent_socket=values[AGENT_SOCKET],
        agent_export_interval=values[AGENT_EXPORT_INTERVAL],
        relay_transport=values[RELAY_TRANSPORT],
        runtime_wait_timeout=values[RUNTIME_WAIT_TIMEOUT],
        metrics_address=values[METRICS_ADDRESS],
        dump=values[DUMP],
        dump_file=values[DUMP_FILE],
        dump_format=values[DUMP_FORMAT],
        dump_unredacted=values[DUMP_UNREDACTED],
        dump_max_size=values[DUMP_MAX_SIZE],
        logger_debug=values[LOGGER_DEBUG],
        reconcile_period=values[RECONCILE_PERIOD],
        state_dir=values[STATE_DIR],
        host_root=values[HOST_ROOT],
        force_config=values[FORCE_CONFIG],
        fallback_config=values[FALLBACK_CONFIG],
        dry_run=values[DRY_RUN],
        disable_policy_switch=values[DISABLE_POLICY_SWITCH],
    )


if __name__ == "__main__":
    main()
