"""The `cri-resmgr` command line: Go-style single-dash long flags, and --flags."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import click
import yaml

from cri_resmgr import app
from cri_resmgr.config import Settings
from cri_resmgr.config.options import OptionFileError, expand_config
from cri_resmgr.config.settings import (
    DEFAULT_CONFIG_SOCKET,
    DEFAULT_RELAY_SOCKET,
    DEFAULT_RUNTIME_SOCKET,
    DEFAULT_STATE_DIR,
)
from cri_resmgr.config.sources import initial_config
from cri_resmgr.policy.registry import UnknownPolicy, default_registry

PROG = "cri-resmgr"


def _opt(name: str, **kw):
    return click.option(f"-{name}", f"--{name}", name.replace("-", "_"), **kw)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@_opt("policy", default="none", show_default=True, metavar="NAME",
      help="Active resource policy (see -list-policies).")
@_opt("list-policies", is_flag=True, help="List the available policies and exit.")
@_opt("relay-socket", default=DEFAULT_RELAY_SOCKET, show_default=True, metavar="PATH",
      help="Socket the relay serves CRI on (point kubelet's --container-runtime-endpoint here).")
@_opt("runtime-socket", default=DEFAULT_RUNTIME_SOCKET, show_default=True, metavar="PATH",
      help="Runtime service socket to relay to; '-' disables the runtime service.")
@_opt("image-socket", default=None, metavar="PATH",
      help="Image service socket; default: the runtime socket; '-' disables the image service.")
@_opt("relay-transport", type=click.Choice(["auto", "h2", "grpc"]), default="auto", show_default=True,
      help="How calls are relayed: 'h2' passes HTTP/2 frames through (fast; one runtime socket), "
           "'grpc' relays each call through gRPC; 'auto' is h2 unless the image socket is separate.")
@_opt("dump", multiple=True, metavar="SPEC",
      help="Dump rules, e.g. 'reset,full:.*' or 'name:List.*,count:Version' (repeatable).")
@_opt("dump-file", default=None, metavar="PATH", help="Write the dump here (mode 0600) instead of stderr.")
@_opt("dump-format", type=click.Choice(["human", "jsonl"]), default="human", show_default=True,
      help="Dump format.")
@_opt("dump-unredacted", is_flag=True, help="Do not mask secret-looking environment variables in dumps.")
@_opt("config-socket", default=DEFAULT_CONFIG_SOCKET, show_default=True, metavar="PATH",
      help="Socket for the node agent's configuration pushes; '-' disables it.")
@_opt("state-dir", default=DEFAULT_STATE_DIR, show_default=True, metavar="DIR",
      help="Where allocations and the last agent configuration are kept across restarts.")
@_opt("host-root", default="/", show_default=True, metavar="DIR",
      help="Root under which sysfs is read for the hardware topology.")
@_opt("force-config", default=None, metavar="FILE",
      help="Resource-manager configuration (YAML) used as is; the agent is ignored; re-read on SIGHUP.")
@_opt("fallback-config", default=None, metavar="FILE",
      help="Resource-manager configuration (YAML) used when no agent configuration is known.")
@_opt("print-config", is_flag=True, help="Print the effective configuration and exit.")
@_opt("dry-run", is_flag=True,
      help="Decide and log ('would set ...') but relay requests unchanged and send no updates.")
@_opt("disable-policy-switch", is_flag=True,
      help="Refuse configurations that change the active policy while running.")
@_opt("runtime-wait-timeout", type=float, default=None, metavar="SECONDS",
      help="Give up if the runtime is not ready in this time (default: wait forever).")
@_opt("metrics-address", default="", metavar="HOST:PORT",
      help="Serve Prometheus metrics on this address (e.g. 127.0.0.1:8891); default: off.")
@_opt("config", default=None, metavar="FILE",
      help="Option file: these options, one per line, without leading dashes.")
@_opt("logger-debug", is_flag=True, help="Log at debug level.")
def command(**kw) -> None:
    """CRI relay and node resource manager.

    Sits between kubelet and the container runtime, relays every CRI call and
    applies the active resource policy to the calls it intercepts.
    """
    registry = default_registry()
    if kw["list_policies"]:
        click.echo(registry.describe())
        return
    try:
        registry.lookup(kw["policy"])
    except UnknownPolicy as e:
        raise click.BadParameter(str(e), param_hint="-policy") from None
    for flag in ("force_config", "fallback_config"):
        path = kw[flag]
        if path is not None and not os.access(path, os.R_OK):
            raise click.BadParameter(f"cannot read {path}", param_hint="-" + flag.replace("_", "-"))
    settings = Settings(
        policy=kw["policy"],
        relay_socket=kw["relay_socket"],
        runtime_socket=kw["runtime_socket"],
        image_socket=kw["image_socket"] if kw["image_socket"] is not None else kw["runtime_socket"],
        config_socket=kw["config_socket"],
        relay_transport=kw["relay_transport"],
        runtime_wait_timeout=kw["runtime_wait_timeout"],
        metrics_address=kw["metrics_address"],
        dump=tuple(kw["dump"]),
        dump_file=kw["dump_file"],
        dump_format=kw["dump_format"],
        dump_unredacted=kw["dump_unredacted"],
        state_dir=kw["state_dir"],
        host_root=kw["host_root"],
        force_config=kw["force_config"],
        fallback_config=kw["fallback_config"],
        dry_run=kw["dry_run"],
        disable_policy_switch=kw["disable_policy_switch"],
    )
    try:
        app.validate(settings)
        config = initial_config(settings, registry.names())
    except ValueError as e:  # ConfigError and DumpSpecError are ValueErrors
        raise click.UsageError(str(e)) from None
    if kw["print_config"]:
        doc = config.to_document()
        doc["policy"]["Active"] = config.policy.active or kw["policy"]
        click.echo(f"# effective configuration (source: {config.source})")
        click.echo(yaml.safe_dump(doc, sort_keys=False).rstrip())
        return
    logging.basicConfig(
        level=logging.DEBUG if kw["logger_debug"] else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sys.exit(asyncio.run(app.run(settings, registry)))


def main(argv: list[str] | None = None) -> None:
    """Entry point. Usage errors are one line on stderr and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = expand_config(args)
        command.main(args=args, prog_name=PROG, standalone_mode=False)
    except OptionFileError as e:
        _usage_error(str(e))
    except click.NoSuchOption as e:
        _usage_error(f"no such option: {_offending(args, e.option_name)}")
    except click.UsageError as e:
        _usage_error(e.format_message().replace("\n", " "))
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)


def _offending(args: list[str], name: str) -> str:
    """click retries an unknown '-long' flag as short flags and names '-l'; name the whole flag."""
    if len(name) == 2:
        for arg in args:
            if arg.startswith(name) and len(arg) > 2 and not arg.startswith("--"):
                return arg.split("=", 1)[0]
    return name


def _usage_error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
