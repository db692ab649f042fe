"""`cri-resmgr simulate`: a policy on a machine and a workload, with no runtime.

    cri-resmgr simulate -shape 2s/4n/64c/2t -churn 1000 -seed 7 -policy static
    cri-resmgr simulate -host-root node.tgz -pods pods.yaml -force-config config.yaml
    cri-resmgr simulate -topology node.json -dump relay.jsonl -fallback-config fallback.yaml -o json

Exit status: 0 when every invariant held, 1 when one did not (or the policy failed on a
container), 2 for a bad command line or input.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence

from cri_resmgr import flags
from cri_resmgr.config import Config, ConfigError, parse_document
from cri_resmgr.config.sources import read_config_file
from cri_resmgr.policy.registry import Registry, UnknownPolicy, default_registry
from cri_resmgr.simulate import churn, dumpread, machine, pods, report
from cri_resmgr.simulate.calls import Call, WorkloadError
from cri_resmgr.simulate.engine import Outcome, SimulationError, simulate
from cri_resmgr.topology import Topology, TopologyError, discover
from cri_resmgr.topology.render import render_json, render_text

__all__ = ["COMMAND", "main", "run"]

# The most a generated workload may ask for: its calls are made as they are handed to
# the engine, but what every call costs is kept (timing, updates), and time grows with
# it (some 1.5 s per 1000 containers here).
MAX_CHURN = 100_000
MAX_LIVE = 32_768  # half the CPUs of the largest -shape
# Each decision may update every live container: the work grows with -churn times -live
# (10000 x 2048 took 100 s here). Beyond this a churn is refused, not left running for hours.
MAX_CHURN_WORK = 50_000_000

POLICY = flags.text("policy", "NAME", "The policy to simulate, unless the configuration's policy.Active names one "
                    "(see cri-resmgr -list-policies).", "none")
FORCE_CONFIG = flags.text("force-config", "FILE", "Resource-manager configuration (YAML), as the relay's "
                          "-force-config.", None)
FALLBACK_CONFIG = flags.text("fallback-config", "FILE", "Resource-manager configuration (YAML), as the relay's "
                             "-fallback-config (there is no agent here: used when -force-config is not given).", None)
HOST_ROOT = flags.text("host-root", "DIR|TARBALL", "The machine: a host root holding sys/devices/system, or a "
                       "tarball of one. Default: this machine, unless -topology or -shape is given.", None)
TOPOLOGY = flags.text("topology", "FILE", "The machine: the JSON `cri-resmgr topology -o json` printed on it.", None)
SHAPE = flags.text("shape", "SPEC", "The machine, generated: sockets, NUMA nodes, cores per socket, threads per "
                   "core as lscpu counts them, e.g. 2s/4n/64c/2t; also Nd (dies per socket), l3=N (cores per L3), "
                   "mem=SIZE (DRAM per node), Npmem|Ncxl|Nhbm[:SIZE] (memory tiers), interleaved, sparse "
                   "(docs/simulate.md).", None)
DUMP = flags.text("dump", "FILE", "The workload: a CRI session the relay recorded with -dump 'full:.*' "
                  "-dump-format jsonl.", None)
PODS = flags.text("pods", "FILE", "The workload: a YAML list of pods (Kubernetes Pods, `kubectl get pods -o "
                  "yaml`, or {name, namespace, annotations, containers: [{name, resources}]}), started in order.", None)
CHURN = flags.option("churn", "N", "The workload: generated pods created and deleted until N containers were "
                     f"created (at most {MAX_CHURN}).", None, flags.integer(low=1, high=MAX_CHURN))
SEED = flags.option("seed", "S", "Seed of -churn.", 1, flags.integer())
LIVE = flags.option("live", "N", "-churn keeps about N containers alive (default: half the CPUs; at most "
                    f"{MAX_LIVE}).", None, flags.integer(low=1, high=MAX_LIVE))


def _fraction(text: str) -> float:
    value = flags.number(low=0)(text)
    if value > 0.9:
        raise ValueError(f"{text} is not in the range 0-0.9")
    return value


RESIZES = flags.option("resizes", "FRACTION", "-churn also resizes live containers in place, as kubelet forwards it, "
                       "in this fraction of its steps (0-0.9).", 0.0, _fraction)
OUTPUT = flags.choice("o", "Output: text for an operator, or JSON for tools.", ("text", "json"), "text")
BRIEF = flags.switch("brief", "Text: leave out each decision and the picture; warnings (the first 20), pools, "
                     "invariants and timing only.")
PRINT_MACHINE = flags.switch("print-machine", "Print the machine as `cri-resmgr topology` does (-o json: its JSON) "
                             "and exit; no workload needed.")
CHECK_EVERY = flags.option("check-every", "N", "Besides the containers each call touches, check every container "
                           "and pool every N calls (0: at the end only).", 0, flags.integer(low=0))

COMMAND = flags.Command(
    "cri-resmgr simulate",
    "Run a policy with no runtime, through the relay's own decision path, on a machine (-host-root, -topology or "
    "-shape) against a workload (-dump, -pods or -churn); print each decision, the updates it caused, the requests "
    "not met, the final allocation as `cri-resmgr status` draws it, invariant checks and decision timing. Exit "
    "status 1 when an invariant does not hold.",
    (POLICY, FORCE_CONFIG, FALLBACK_CONFIG, HOST_ROOT, TOPOLOGY, SHAPE, PRINT_MACHINE, DUMP, PODS, CHURN, SEED, LIVE,
     RESIZES, OUTPUT, BRIEF, CHECK_EVERY),
)


def main(argv: Sequence[str]) -> int:
    return COMMAND.run(argv, run)


def run(values: flags.Values) -> int:
    registry = default_registry()
    try:
        registry.lookup(values[POLICY])
    except UnknownPolicy as e:
        raise flags.UsageError(f"invalid value for -policy: {e}") from None
    _one_of(values, (HOST_ROOT, TOPOLOGY, SHAPE), required=False)
    if values[PRINT_MACHINE]:
        return _print_machine(values)
    _one_of(values, (DUMP, PODS, CHURN), required=True)
    try:
        config = _config(values, registry)
        topology = _machine(values)
        calls, workload = _workload(values, topology)
        outcome = simulate(calls, topology, config, values[POLICY], registry, keep_steps=_keep(values),
                           check_every=values[CHECK_EVERY])
    except (WorkloadError, TopologyError, ConfigError, SimulationError) as e:
        raise flags.CommandError(str(e), flags.EXIT_USAGE) from None
    _print(outcome, workload, values)
    return 0 if outcome.checker.count == 0 and outcome.policy_errors == 0 else 1


def _print_machine(values: flags.Values) -> int:
    try:
        topology = _machine(values)
    except TopologyError as e:
        raise flags.CommandError(str(e), flags.EXIT_USAGE) from None
    print(render_json(topology) if values[OUTPUT] == "json" else render_text(topology))
    return 0


def _keep(values: flags.Values) -> bool:
    return values[OUTPUT] == "json" or not values[BRIEF]


def _print(outcome: Outcome, workload: str, values: flags.Values) -> None:
    if values[OUTPUT] == "json":
        sys.stdout.write(report.render_json(outcome, workload))
        return
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    sys.stdout.write(report.render_text(outcome, workload, values[BRIEF], colour))


def _one_of(values: flags.Values, choices: Sequence[flags.Flag[object]], required: bool) -> None:
    given = [f for f in choices if values[f] is not None]
    names = ", ".join(f"-{f.name}" for f in choices)
    if len(given) > 1:
        raise flags.UsageError(f"give only one of {names}")
    if required and not given:
        raise flags.UsageError(f"give one of {names} (the workload)")


def _config(values: flags.Values, registry: Registry) -> Config:
    names = registry.names()
    for flag in (FORCE_CONFIG, FALLBACK_CONFIG):
        path = values[flag]
        if path is not None:
            return parse_document(read_config_file(path), path, names)
    return Config()


def _machine(values: flags.Values) -> Topology:
    if (path := values[TOPOLOGY]) is not None:
        return machine.from_json_file(path)
    if (spec := values[SHAPE]) is not None:
        return machine.from_shape(spec)
    if (root := values[HOST_ROOT]) is not None:
        return machine.from_host_root(root)
    return discover("/")


def _workload(values: flags.Values, topology: Topology) -> tuple[Iterable[Call], str]:
    if (dump := values[DUMP]) is not None:
        return dumpread.read_dump(dump).calls, f"dump {dump}"
    if (pods_file := values[PODS]) is not None:
        found = pods.read_pods(pods_file)
        steps = sum(isinstance(item, pods.Resize) for item in found)
        resizes = f" and {flags.plural(steps, 'resize')}" if steps else ""
        return pods.pod_calls(found), (flags.plural(len(found) - steps, "pod") + resizes
                                       + f" from {pods_file}")
    n, seed = values[CHURN], values[SEED]
    assert n is not None  # one of the three was given (_one_of)
    live = values[LIVE] or min(max(4, len(topology.online) // 2), MAX_LIVE)
    rate = values[RESIZES]
    # A resize step costs about what a decision does: the steps are n / (1 - rate).
    if n * live / (1 - rate) > MAX_CHURN_WORK:
        given = "" if values[LIVE] else " (the -live default)"
        raise flags.UsageError(f"-churn {n} with about {live} containers alive{given}"
                               + (f" and -resizes {rate:g}" if rate else "") + " is more than this simulator does in "
                               f"minutes (churn x live at most {MAX_CHURN_WORK}); give a smaller -churn or -live")
    return churn.iter_churn_calls(n, seed, live, rate), (f"churn of {n} containers (seed {seed}, about {live} alive"
                                                         + (f", {rate:g} of the steps resizes" if rate else "") + ")")
