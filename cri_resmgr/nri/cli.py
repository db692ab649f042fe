"""The `cri-resmgr-nri` command line: the relay's engine flags, plus where NRI is.

A runtime that launches the plugin itself hands it a connected socket and its
name and index in the environment (NRI_PLUGIN_SOCKET, NRI_PLUGIN_NAME,
NRI_PLUGIN_IDX); they take precedence over the flags, as in NRI's own plugins.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence

from cri_resmgr import __version__, flags
from cri_resmgr.config import Settings
from cri_resmgr.config.options import OptionFileError, expand_config
from cri_resmgr.config.sources import initial_config
from cri_resmgr.dump import parse_specs
from cri_resmgr.frontend import logsetup, printconfig
from cri_resmgr.nri import app
from cri_resmgr.nri.plugin import Identity, check_index, check_name
from cri_resmgr.policy.registry import Registry, UnknownPolicy, default_registry
from cri_resmgr.relay import cli as relay_cli

PROG = "cri-resmgr-nri"

ENV_SOCKET = "NRI_PLUGIN_SOCKET"
ENV_NAME = "NRI_PLUGIN_NAME"
ENV_INDEX = "NRI_PLUGIN_IDX"

NRI_SOCKET = flags.text("nri-socket", "PATH", "The runtime's NRI socket (ignored when the runtime hands a "
                        f"connection over in ${ENV_SOCKET}).", app.DEFAULT_NRI_SOCKET)
PLUGIN_NAME = flags.text("nri-plugin-name", "NAME", f"Name to register with (${ENV_NAME} overrides it).",
                         app.DEFAULT_PLUGIN_NAME)
PLUGIN_INDEX = flags.text("nri-plugin-index", "NN", "Two-digit index to register with: the runtime calls plugins "
                          f"in ascending order (${ENV_INDEX} overrides it).", app.DEFAULT_PLUGIN_INDEX)

RUNTIME_CLASSES = flags.switch("nri-runtime-classes", "Also name each container's block I/O and RDT class in its "
                               "NRI adjustment (blockio_class, rdt_class), for a runtime configured with the same "
                               "classes (containerd's blockio_config_file, rdt_config_file): the runtime applies "
                               "them from creation. The plugin's own class controller enforces them either way; "
                               "an adjustment naming a class the runtime does not know fails the container.")

COMMAND = flags.Command(
    PROG,
    "cri-resmgr's resource policies as an NRI plugin of the container runtime (containerd 1.7+, CRI-O 1.26+): "
    "the same engine, configuration, state directory and metrics as the cri-resmgr relay, without a CRI relay "
    "in front of the runtime. Only one of the two may manage a node.",
    (relay_cli.POLICY, relay_cli.LIST_POLICIES, NRI_SOCKET, PLUGIN_NAME, PLUGIN_INDEX, RUNTIME_CLASSES, relay_cli.DUMP,
     relay_cli.DUMP_FILE, relay_cli.DUMP_FORMAT, relay_cli.DUMP_MAX_SIZE, relay_cli.DUMP_UNREDACTED,
     relay_cli.CONFIG_SOCKET, relay_cli.STATE_DIR, relay_cli.HOST_ROOT, relay_cli.FORCE_CONFIG,
     relay_cli.FALLBACK_CONFIG, relay_cli.PRINT_CONFIG, relay_cli.DRY_RUN, relay_cli.DISABLE_POLICY_SWITCH,
     relay_cli.METRICS_ADDRESS, relay_cli.RECONCILE_PERIOD, relay_cli.CONFIG, relay_cli.LOGGER_DEBUG,
     relay_cli.LOG_FORMAT),
    version=__version__,
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point. Usage errors are one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = logsetup.debug_flag_value(expand_config(args, {f.name for f in COMMAND.flags},
                                                       relay_cli.path_flags(COMMAND)),
                                         relay_cli.LOGGER_DEBUG.name)
    except OptionFileError as e:
        sys.exit(COMMAND.report(flags.UsageError(str(e))))
    sys.exit(COMMAND.run(args, _run))


def nri_settings(values: flags.Values, env: Mapping[str, str]) -> app.NriSettings:
    """Where NRI is and who we are; raises UsageError naming a bad value."""
    name = env.get(ENV_NAME) or values[PLUGIN_NAME] or app.DEFAULT_PLUGIN_NAME
    index = env.get(ENV_INDEX) or values[PLUGIN_INDEX] or app.DEFAULT_PLUGIN_INDEX
    source = f"${ENV_INDEX}" if env.get(ENV_INDEX) else "-nri-plugin-index"
    try:
        check_index(index)
    except ValueError as e:
        raise flags.UsageError(f"invalid value for {source}: {e}") from None
    try:
        check_name(name)
    except ValueError as e:
        named = f"${ENV_NAME}" if env.get(ENV_NAME) else "-nri-plugin-name"
        raise flags.UsageError(f"invalid value for {named}: {e}") from None
    fd = None
    if env.get(ENV_SOCKET):
        try:
            fd = int(env[ENV_SOCKET])
        except ValueError:
            raise flags.UsageError(f"invalid ${ENV_SOCKET} {env[ENV_SOCKET]!r}: expected a file descriptor number") \
                from None
    return app.NriSettings(socket=values[NRI_SOCKET] or app.DEFAULT_NRI_SOCKET, identity=Identity(name, index),
                           handed_fd=fd, runtime_classes=bool(values[RUNTIME_CLASSES]))


def _run(values: flags.Values) -> int:
    registry = default_registry()
    if values[relay_cli.LIST_POLICIES]:
        print(registry.describe())
        return 0
    nri = nri_settings(values, os.environ)
    settings = _settings(values, registry)
    try:
        config = initial_config(settings, registry.names())
        if values[relay_cli.PRINT_CONFIG]:
            print(printconfig.render(settings, config, registry))
            return 0
        printconfig.check(settings, config, registry)  # a bad value exits 2 before the runtime is met
    except ValueError as e:  # ConfigError, DumpSpecError and TopologyError are ValueErrors
        raise flags.UsageError(str(e)) from None
    debug = logsetup.setup(settings.logger_debug, values[relay_cli.LOG_FORMAT])
    return asyncio.run(app.run(settings, nri, registry, debug.set_config_debug))


def _settings(values: flags.Values, registry: Registry) -> Settings:
    try:
        registry.lookup(values[relay_cli.POLICY])
    except UnknownPolicy as e:
        raise flags.UsageError(f"invalid value for -policy: {e}") from None
    for flag in (relay_cli.FORCE_CONFIG, relay_cli.FALLBACK_CONFIG):
        path = values[flag]
        if path is not None and not os.access(path, os.R_OK):
            raise flags.UsageError(f"invalid value for -{flag.name}: cannot read {path}")
    try:
        parse_specs(list(values[relay_cli.DUMP]))
    except ValueError as e:
        raise flags.UsageError(f"invalid value for -dump: {e}") from None
    return Settings(
        policy=values[relay_cli.POLICY], config_socket=values[relay_cli.CONFIG_SOCKET],
        agent_socket="-", agent_export_interval=0, metrics_address=values[relay_cli.METRICS_ADDRESS],
        dump=values[relay_cli.DUMP], dump_file=values[relay_cli.DUMP_FILE], dump_format=values[relay_cli.DUMP_FORMAT],
        dump_unredacted=values[relay_cli.DUMP_UNREDACTED], dump_max_size=values[relay_cli.DUMP_MAX_SIZE],
        logger_debug=values[relay_cli.LOGGER_DEBUG], reconcile_period=values[relay_cli.RECONCILE_PERIOD],
        state_dir=values[relay_cli.STATE_DIR], host_root=values[relay_cli.HOST_ROOT],
        force_config=values[relay_cli.FORCE_CONFIG], fallback_config=values[relay_cli.FALLBACK_CONFIG],
        dry_run=values[relay_cli.DRY_RUN], disable_policy_switch=values[relay_cli.DISABLE_POLICY_SWITCH],
    )


if __name__ == "__main__":
    main()
