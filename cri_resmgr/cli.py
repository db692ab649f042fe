"""The `cri-resmgr` command line: Go-style flags (cri_resmgr.flags), and an option file."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence

import yaml

from cri_resmgr import __version__, app, flags
from cri_resmgr.config import Config, Settings
from cri_resmgr.config.options import OptionFileError, expand_config
from cri_resmgr.config.settings import (
    DEFAULT_CONFIG_SOCKET,
    DEFAULT_RELAY_SOCKET,
    DEFAULT_RUNTIME_SOCKET,
    DEFAULT_STATE_DIR,
)
from cri_resmgr.config.sources import initial_config
from cri_resmgr.policy.registry import Registry, UnknownPolicy, default_registry

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
DUMP_UNREDACTED = flags.switch("dump-unredacted", "Do not mask secret-looking environment variables in dumps.")
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
RUNTIME_WAIT_TIMEOUT = flags.option("runtime-wait-timeout", "SECONDS", "Give up if the runtime is not ready in "
                                    "this time (default: wait forever).", None, flags.number())
METRICS_ADDRESS = flags.text("metrics-address", "HOST:PORT", "Serve Prometheus metrics on this address (e.g. "
                             "127.0.0.1:8891); default: off.", "")
# Read by expand_config before parsing; here for -help.
CONFIG = flags.text("config", "FILE", "Option file: these options, one per line, without leading dashes.", None)
LOGGER_DEBUG = flags.switch("logger-debug", "Log at debug level.")

COMMAND = flags.Command(
    PROG,
    "CRI relay and node resource manager. Sits between kubelet and the container runtime, relays every CRI "
    "call and applies the active resource policy to the calls it intercepts.",
    (POLICY, LIST_POLICIES, RELAY_SOCKET, RUNTIME_SOCKET, IMAGE_SOCKET, RELAY_TRANSPORT, DUMP, DUMP_FILE,
     DUMP_FORMAT, DUMP_UNREDACTED, CONFIG_SOCKET, STATE_DIR, HOST_ROOT, FORCE_CONFIG, FALLBACK_CONFIG,
     PRINT_CONFIG, DRY_RUN, DISABLE_POLICY_SWITCH, RUNTIME_WAIT_TIMEOUT, METRICS_ADDRESS, CONFIG, LOGGER_DEBUG),
    version=__version__,
)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point. Usage errors are one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = expand_config(args)
    except OptionFileError as e:
        sys.exit(COMMAND.report(flags.UsageError(str(e))))
    sys.exit(COMMAND.run(args, _run))


def _run(values: flags.Values) -> int:
    registry = default_registry()
    if values[LIST_POLICIES]:
        print(registry.describe())
        return 0
    settings = _settings(values, registry)
    try:
        app.validate(settings)
        config = initial_config(settings, registry.names())
    except ValueError as e:  # ConfigError and DumpSpecError are ValueErrors
        raise flags.UsageError(str(e)) from None
    if values[PRINT_CONFIG]:
        _print_config(config, values[POLICY])
        return 0
    logging.basicConfig(
        level=logging.DEBUG if values[LOGGER_DEBUG] else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(app.run(settings, registry))


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
        relay_transport=values[RELAY_TRANSPORT],
        runtime_wait_timeout=values[RUNTIME_WAIT_TIMEOUT],
        metrics_address=values[METRICS_ADDRESS],
        dump=values[DUMP],
        dump_file=values[DUMP_FILE],
        dump_format=values[DUMP_FORMAT],
        dump_unredacted=values[DUMP_UNREDACTED],
        state_dir=values[STATE_DIR],
        host_root=values[HOST_ROOT],
        force_config=values[FORCE_CONFIG],
        fallback_config=values[FALLBACK_CONFIG],
        dry_run=values[DRY_RUN],
        disable_policy_switch=values[DISABLE_POLICY_SWITCH],
    )


def _print_config(config: Config, policy: str) -> None:
    doc = config.to_document()
    doc["policy"]["Active"] = config.policy.active or policy
    print(f"# effective configuration (source: {config.source})")
    print(yaml.safe_dump(doc, sort_keys=False).rstrip())


if __name__ == "__main__":
    main()
