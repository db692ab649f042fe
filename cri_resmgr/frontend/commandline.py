"""The command line both front ends share: the flags of the engine, its configuration, state
directory, dump, metrics and logging (defined once: `-help` reads the same in `cri-resmgr` and
`cri-resmgr-nri`), the option file, and the one step from flags to `config.Settings`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from cri_resmgr import flags
from cri_resmgr.config import Settings
from cri_resmgr.config.options import OptionFileError, expand_config
from cri_resmgr.config.settings import DEFAULT_CONFIG_SOCKET, DEFAULT_RECONCILE_PERIOD, DEFAULT_STATE_DIR
from cri_resmgr.config.sources import initial_config
from cri_resmgr.dump import parse_specs
from cri_resmgr.frontend import logsetup, printconfig
from cri_resmgr.policy.registry import Registry, UnknownPolicy

POLICY = flags.text("policy", "NAME", "Active resource policy (see -list-policies).", "none")
LIST_POLICIES = flags.switch("list-policies", "List the available policies and exit.")
DUMP = flags.repeated("dump", "SPEC", "Dump rules, e.g. 'reset,full:.*' or 'name:List.*,count:Version' "
                      "(repeatable).")
DUMP_FILE = flags.text("dump-file", "PATH", "Write the dump here (mode 0600) instead of stderr.", None)
DUMP_FORMAT = flags.choice("dump-format", "Dump format.", ("human", "jsonl"), "human")
DUMP_MAX_SIZE = flags.option("dump-max-size", "BYTES", "Cap the dump file: past this size it is renamed to "
                             "FILE.1 and a new one started. The dump file is reopened on SIGHUP (logrotate).",
                             None, flags.integer(low=1))
DUMP_UNREDACTED = flags.switch(
    "dump-unredacted", "Do not mask secret-looking values (environment, annotations, flags, verbose info) in dumps.")
CONFIG_SOCKET = flags.text("config-socket", "PATH", "Socket for the node agent's configuration pushes; '-' "
                           "disables it.", DEFAULT_CONFIG_SOCKET)
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
METRICS_ADDRESS = flags.text("metrics-address", "HOST:PORT", "Serve Prometheus metrics (/metrics) and health "
                             "(/healthz, /readyz) on this address (e.g. 127.0.0.1:8888; ':8888' is 127.0.0.1:8888); "
                             "default: off.", "")
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


def run(command: flags.Command, argv: Sequence[str], body: Callable[[flags.Values], int]) -> NoReturn:
    """Runs `command` on `argv` after an option file (-config) and a bare -logger-debug are
    expanded, and exits with its code: usage errors are one line on stderr and exit code 2."""
    try:
        args = logsetup.debug_flag_value(expand_config(list(argv), {f.name for f in command.flags},
                                                       path_flags(command)), LOGGER_DEBUG.name)
    except OptionFileError as e:
        sys.exit(command.report(flags.UsageError(str(e))))
    sys.exit(command.run(args, body))


def path_flags(command: flags.Command) -> set[str]:
    """The flags whose values are paths: relative ones in an option file are the file's."""
    return {f.name for f in command.flags if f.metavar in ("PATH", "FILE", "DIR")}


def settings(values: flags.Values, registry: Registry, front_end: Settings) -> Settings:
    """`front_end` (the front end's own fields, from its own flags) with the shared flags'
    fields, after the checks that need no configuration; raises UsageError naming the bad value."""
    try:
        registry.lookup(values[POLICY])
    except UnknownPolicy as e:
        raise flags.UsageError(f"invalid value for -policy: {e}") from None
    for flag in (FORCE_CONFIG, FALLBACK_CONFIG):
        path = values[flag]
        if path is not None:
            why = _unreadable(path)
            if why:
                raise flags.UsageError(f"invalid value for -{flag.name}: cannot read {path}: {why}")
    try:
        parse_specs(list(values[DUMP]))
    except ValueError as e:
        raise flags.UsageError(f"invalid value for -dump: {e}") from None
    address = values[METRICS_ADDRESS]
    if address:
        _, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise flags.UsageError(f"-metrics-address {address!r}: expected HOST:PORT (or :PORT)")
    return dataclasses.replace(
        front_end, policy=values[POLICY], config_socket=values[CONFIG_SOCKET], metrics_address=values[METRICS_ADDRESS],
        dump=values[DUMP], dump_file=values[DUMP_FILE], dump_format=values[DUMP_FORMAT],
        dump_unredacted=values[DUMP_UNREDACTED], dump_max_size=values[DUMP_MAX_SIZE],
        logger_debug=values[LOGGER_DEBUG], reconcile_period=values[RECONCILE_PERIOD], state_dir=values[STATE_DIR],
        host_root=values[HOST_ROOT], force_config=values[FORCE_CONFIG], fallback_config=values[FALLBACK_CONFIG],
        dry_run=values[DRY_RUN], disable_policy_switch=values[DISABLE_POLICY_SWITCH])


def listed_policies(values: flags.Values, registry: Registry) -> bool:
    """-list-policies: True when it printed them (nothing more to do)."""
    if values[LIST_POLICIES]:
        print(registry.describe())
    return bool(values[LIST_POLICIES])


def printed_or_checked(values: flags.Values, settings: Settings, registry: Registry) -> bool:
    """The configuration the front end would start with: printed (-print-config; True: nothing
    more to do), or checked against this node before the runtime is met, so that one that
    cannot work here is a usage error (exit 2) rather than a failed start."""
    try:
        config = initial_config(settings, registry.names())
        if values[PRINT_CONFIG]:
            print(printconfig.render(settings, config, registry))
            return True
        printconfig.check(settings, config, registry)
    except ValueError as e:  # ConfigError, DumpSpecError and TopologyError are ValueErrors
        raise flags.UsageError(str(e)) from None
    return False


def log_setup(values: flags.Values, settings: Settings) -> Callable[[bool], None]:
    """Logging as the flags say; what a configuration's `logger.Debug` turns on and off."""
    return logsetup.setup(settings.logger_debug, values[LOG_FORMAT]).set_config_debug


def _unreadable(path: str) -> str:
    """Why path cannot be read as a file (the errno's words: `No such file or directory`), or ''."""
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        return e.strerror or type(e).__name__
    return ""
