"""The `cri-resmgr` command line: the relay's own flags beside the ones it shares with the
NRI plugin (frontend/commandline.py), and the subcommands."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence

from cri_resmgr import __version__, flags
from cri_resmgr.config import Settings
from cri_resmgr.config.settings import (
    DEFAULT_AGENT_EXPORT_INTERVAL,
    DEFAULT_AGENT_SOCKET,
    DEFAULT_RELAY_SOCKET,
    DEFAULT_RUNTIME_SOCKET,
)
from cri_resmgr.frontend import commandline as common
from cri_resmgr.frontend import health
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.relay import app
from cri_resmgr.status import command as status
from cri_resmgr.topology import TopologyError, discover
from cri_resmgr.topology.render import render_json, render_text
from cri_resmgr.transport import eventloop

PROG = "cri-resmgr"

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
AGENT_SOCKET = flags.text("agent-socket", "PATH", "The node agent's Agent service, used to publish this "
                          "node's free exclusive CPUs and pools on its Node; '-' disables it.", DEFAULT_AGENT_SOCKET)
AGENT_EXPORT_INTERVAL = flags.option("agent-export-interval", "SECONDS", "Publish changes on the Node at most "
                                     "this often; 0 disables publishing.", DEFAULT_AGENT_EXPORT_INTERVAL,
                                     flags.number(low=0))
RUNTIME_WAIT_TIMEOUT = flags.option("runtime-wait-timeout", "SECONDS", "Give up if the runtime is not ready in "
                                    "this time (default: wait forever).", None, flags.number(low=0))
PROBE = flags.switch("probe", "Ask the relay at -metrics-address (default for this: 127.0.0.1:8888, as "
                     "`cri-resmgr status`) whether it is ready (/readyz); one line, exit 0 if so, 1 if not.")

COMMAND = flags.Command(
    PROG,
    "CRI relay and node resource manager. Sits between kubelet and the container runtime, relays every CRI "
    "call and applies the active resource policy to the calls it intercepts.",
    (common.POLICY, common.LIST_POLICIES, RELAY_SOCKET, RUNTIME_SOCKET, IMAGE_SOCKET, RELAY_TRANSPORT,
     common.DUMP, common.DUMP_FILE, common.DUMP_FORMAT, common.DUMP_MAX_SIZE, common.DUMP_UNREDACTED,
     common.CONFIG_SOCKET, AGENT_SOCKET, AGENT_EXPORT_INTERVAL, common.STATE_DIR, common.HOST_ROOT,
     common.FORCE_CONFIG, common.FALLBACK_CONFIG, common.PRINT_CONFIG, common.DRY_RUN, common.DISABLE_POLICY_SWITCH,
     RUNTIME_WAIT_TIMEOUT, common.METRICS_ADDRESS, PROBE, common.RECONCILE_PERIOD, common.CONFIG,
     common.LOGGER_DEBUG, common.LOG_FORMAT),
    version=__version__,
)


# `cri-resmgr topology`: what the relay believes about the node, for an operator to check.
TOPOLOGY_OUTPUT = flags.choice("o", "Output format: a text picture, or JSON for tools.", ("text", "json"), "text")
TOPOLOGY = flags.Command(
    f"{PROG} topology",
    "Print the hardware topology as discovered under the host root: packages, dies, NUMA nodes, caches, "
    "cores and threads, memory per node, offline and isolated CPUs, and what discovery left out.",
    (common.HOST_ROOT, TOPOLOGY_OUTPUT),
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
    """One usage line for both forms (the relay's flags, or a command), then the commands."""
    lines = COMMAND.help().splitlines()
    width = max(len(name) for name, _ in SUBCOMMANDS)
    usage = [f"{lines[0]}, or: {PROG} COMMAND [flags] (each command has -help)", ""] + \
        [f"  {name.ljust(width)}  {what}" for name, what in SUBCOMMANDS]
    return "\n".join(usage + lines[1:])


def _no_such_command(word: str) -> int:
    """A first word that is no flag is a command: a misspelled one gets a guess, as flags do."""
    names = [name for name, _ in SUBCOMMANDS]
    near = difflib.get_close_matches(word, names, n=1, cutoff=0.6) if len(word) <= 100 else []
    hint = f"did you mean {near[0]}?" if near else f"commands: {', '.join(names)}"
    return COMMAND.report(flags.UsageError(f"no such command: {flags.clipped(word)} ({hint})"))


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
    if args and not args[0].startswith("-"):
        sys.exit(_no_such_command(args[0]))
    common.run(COMMAND, args, _run)


def _run(values: flags.Values) -> int:
    registry = default_registry()
    if common.listed_policies(values, registry):
        return 0
    if values[PROBE]:  # the same default address as `cri-resmgr status`
        ready, reason = health.probe(values[common.METRICS_ADDRESS] or status.DEFAULT_ADDRESS)
        print(flags.probe_line(ready, reason), file=sys.stdout if ready else sys.stderr)
        return 0 if ready else 1
    image_socket = values[IMAGE_SOCKET]
    settings = common.settings(values, registry, Settings(
        relay_socket=values[RELAY_SOCKET], runtime_socket=values[RUNTIME_SOCKET],
        image_socket=image_socket if image_socket is not None else values[RUNTIME_SOCKET],
        agent_socket=values[AGENT_SOCKET], agent_export_interval=values[AGENT_EXPORT_INTERVAL],
        relay_transport=values[RELAY_TRANSPORT], runtime_wait_timeout=values[RUNTIME_WAIT_TIMEOUT]))
    try:
        app.validate(settings)
    except ValueError as e:
        raise flags.UsageError(str(e)) from None
    # Before the runtime is waited for: a configuration that cannot work here exits 2 now.
    if common.printed_or_checked(values, settings, registry):
        return 0
    return eventloop.run(app.run(settings, registry, common.log_setup(values, settings)))


def _topology(values: flags.Values) -> int:
    try:
        topo = discover(values[common.HOST_ROOT])
    except TopologyError as e:
        raise flags.CommandError(str(e)) from None
    print(render_json(topo) if values[TOPOLOGY_OUTPUT] == "json" else render_text(topo))
    return 0


if __name__ == "__main__":
    main()
