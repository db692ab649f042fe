"""The `cri-resmgr-nri` command line: the flags it shares with the relay (frontend/commandline.py),
plus where NRI is.

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
from cri_resmgr.config.settings import DISABLED
from cri_resmgr.frontend import commandline as common
from cri_resmgr.nri import app
from cri_resmgr.nri.plugin import Identity, check_index, check_name
from cri_resmgr.policy.registry import default_registry

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
                               "an adjustment naming a class the runtime does not know fails the container. "
                               "And its scheduling class (linux.scheduler, linux.io_priority: NRI v0.11+, "
                               "containerd 2.2.1+; older runtimes skip them).")

COMMAND = flags.Command(
    PROG,
    "cri-resmgr's resource policies as an NRI plugin of the container runtime (containerd 1.7+, CRI-O 1.26+): "
    "the same engine, configuration, state directory and metrics as the cri-resmgr relay, without a CRI relay "
    "in front of the runtime. Only one of the two may manage a node.",
    (common.POLICY, common.LIST_POLICIES, NRI_SOCKET, PLUGIN_NAME, PLUGIN_INDEX, RUNTIME_CLASSES, common.DUMP,
     common.DUMP_FILE, common.DUMP_FORMAT, common.DUMP_MAX_SIZE, common.DUMP_UNREDACTED, common.CONFIG_SOCKET,
     common.STATE_DIR, common.HOST_ROOT, common.FORCE_CONFIG, common.FALLBACK_CONFIG, common.PRINT_CONFIG,
     common.DRY_RUN, common.DISABLE_POLICY_SWITCH, common.METRICS_ADDRESS, common.RECONCILE_PERIOD, common.CONFIG,
     common.LOGGER_DEBUG, common.LOG_FORMAT),
    version=__version__,
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point. Usage errors are one line on stderr and exit code 2."""
    common.run(COMMAND, sys.argv[1:] if argv is None else argv, _run)


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
    if common.listed_policies(values, registry):
        return 0
    nri = nri_settings(values, os.environ)
    # No agent: the plugin publishes nothing on the Node.
    settings = common.settings(values, registry, Settings(agent_socket=DISABLED, agent_export_interval=0))
    if common.printed_or_checked(values, settings, registry):  # a bad value exits 2 before the runtime is met
        return 0
    return asyncio.run(app.run(settings, nri, registry, common.log_setup(values, settings)))


if __name__ == "__main__":
    main()
