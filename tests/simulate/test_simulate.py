"""`cri-resmgr simulate`: decisions through the engine's path, the report, invariants
catching a broken policy, and the command line's errors."""

from __future__ import annotations

import json
import textwrap

import pytest

from cri_resmgr import cli
from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.api import Assignment, Decision, Resources, Workload
from cri_resmgr.policy.registry import PolicyInfo, Registry, default_registry
from cri_resmgr.policy.usage import PolicyUsage
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import SimulationError, simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.replay import map_ids
from cri_resmgr.simulate.report import render_json, render_text
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology.cpuset import CPUSet

PODS = textwrap.dedent("""
    - name: a
      containers: [{name: c, resources: {limits: {cpu: 2, memory: 1Gi}}}]
    - name: b
      containers: [{name: c, resources: {limits: {cpu: 2, memory: 1Gi}}}]
    - name: s
      containers: [{name: c, resources: {requests: {cpu: 100m}}}]
    - name: big
      containers: [{name: c, resources: {limits: {cpu: 8, memory: 1Gi}}}]
""")

POLICIES = [p.name for p in default_registry() if p.factory is not None]


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_static_decisions_updates_warnings_and_final_state():
    topo = topology_of("1s/2n/4c/2t")
    o = simulate(pod_calls(parse_pods(PODS, "p.yaml")), topo, Config(PolicyConfig(reserved_cpu=1)), "static",
                 default_registry())
    texts = [e.container + " " + (str(e.assignment.exclusive) if e.assignment else "") for s in o.steps
             for e in s.events]
    assert texts == ["default/a:c 2-3", "default/b:c 4-5", "default/s:c ", "default/big:c "]
    assert len(o.warnings) == 1 and "default/big:c" in o.warnings[0] and "wants 8 exclusive CPUs" in o.warnings[0]
    assert o.checker.count == 0 and o.policy_errors == 0
    text = render_text(o, "p.yaml")
    assert "default/a:c: exclusive CPUs 2-3, mems 0" in text
    assert "Final allocation:" in text and "CPU 2 a:c  CPU 3 a:c" in text and "1 package," in text
    assert "Invariants:" in text and "all hold" in text
    doc = json.loads(render_json(o, "p.yaml"))
    state = {c["pod"]: c for c in doc["state"]["containers"]}
    assert state["a"]["exclusive_cpus"] == "2-3" and state["big"]["pool"] == "shared"
    assert doc["steps"][0]["decisions"][0]["text"] == "default/a:c: exclusive CPUs 2-3, mems 0"


def test_updates_to_others_are_what_the_relay_would_send():
    text = "- {name: s, containers: [{name: c}]}\n- {name: g, containers: [{name: c, resources: {limits: " \
           "{cpu: 2, memory: 1Gi}}}]}\n"
    o = simulate(pod_calls(parse_pods(text, "p")), topology_of("4c/2t"), Config(), "static", default_registry())
    step = next(s for s in o.steps if s.updates)
    assert step.method == "CreateContainer" and list(step.updates) == [o.steps[0].events[0].key]
    assert step.updates[o.steps[0].events[0].key].cpuset_cpus == CPUSet("2-7")
    assert o.updates == 1


@pytest.mark.parametrize("policy", POLICIES)
def test_churn_holds_every_invariant_with_every_policy(policy):
    topo = topology_of("2s/4n/8c/2t/1pmem")
    o = simulate(churn_calls(300, seed=5, target=24), topo, Config(PolicyConfig(reserved_cpu=2)), policy,
                 default_registry(), keep_steps=False, check_every=50)
    assert o.checker.count == 0, o.checker.violations
    assert o.policy_errors == 0 and o.messages == []
    assert o.checker.full_passes > 1 and len(o.decision_ns) > 300
    assert not o.steps  # brief: nothing kept


class DoubleBooking:
    """Gives every container CPU 0 exclusively: the invariants must say so."""

    def __init__(self, _ctx):
        self.book: dict[str, Workload] = {}

    def allocate(self, w):
        self.book[w.key] = w
        return Decision(resources=Resources(CPUSet([0]), "0"))

    def release(self, key):
        self.book.pop(key, None)
        return Decision()

    def restore(self, items):
        return Decision()

    def resources(self, key):
        return Resources(CPUSet([0]), "0") if key in self.book else None

    def assignments(self):
        return {k: Assignment("shared", CPUSet([0])) for k in self.book}

    def assignment(self, key):
        return Assignment("shared", CPUSet([0])) if key in self.book else None

    def usage(self):
        return PolicyUsage(pools=(), exclusive_free=CPUSet([0]), exclusive={k: CPUSet([0]) for k in self.book})


def test_invariants_catch_a_policy_that_double_books():
    registry = Registry([PolicyInfo("broken", "test", DoubleBooking)])
    o = simulate(pod_calls(parse_pods(PODS, "p")), topology_of("4c"), Config(), "broken", registry)
    assert o.checker.count >= 3
    assert any("CPU 0 is exclusive to both default/a:c and default/b:c" in v for v in o.checker.violations)
    assert any("reported free but are exclusive" in v for v in o.checker.violations)
    assert "violation" in render_text(o, "p")


def test_a_policy_that_decides_nothing_is_refused():
    with pytest.raises(SimulationError, match="policy none decides nothing"):
        simulate([], topology_of("4c"), Config(), "none", default_registry())
    with pytest.raises(SimulationError, match="ReservedResources"):
        simulate([], topology_of("4c"), Config(PolicyConfig(reserved_cpu=9)), "static", default_registry())


def test_cli_text_json_and_exit_codes(tmp_path, capsys):
    pods = tmp_path / "pods.yaml"
    pods.write_text(PODS)
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  Active: static-plus\n  ReservedResources:\n    CPU: 1\n")
    code, out, err = run(capsys, "--shape", "1s/2n/4c/2t", "-pods", str(pods), "-force-config", str(config))
    assert code == 0, err
    assert "Simulation of policy static-plus, configuration from " + str(config) in out
    assert "Policy static-plus" in out and "Timing:" in out  # the status picture, then timing
    code, out, _ = run(capsys, "-shape=2s/2n/4c", "-churn", "40", "-seed", "3", "-policy", "static", "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["invariants"]["violations"] == 0 and doc["timing"]["decisions"]["n"] >= 40
    code, out, _ = run(capsys, "-shape", "4c", "-churn", "40", "-policy", "static", "-brief")
    assert code == 0 and "Decisions:" not in out and "Final pools:" in out


def test_print_machine(capsys):
    code, out, _ = run(capsys, "-shape", "2s/2n/4c/2t/1hbm", "-print-machine")
    assert code == 0 and out.startswith("Machine: 16 online CPUs (0-15), 8 cores, 2 packages")
    assert "NUMANode 2 (HBM" in out
    code, out, _ = run(capsys, "-shape", "4c", "-print-machine", "-o", "json")
    assert code == 0 and json.loads(out)["online"] == "0-3"


@pytest.mark.parametrize("args, says", [
    (["-shape", "4c"], "give one of -dump, -pods, -churn"),
    (["-shape", "4c", "-topology", "x.json", "-churn", "3"], "give only one of -host-root, -topology, -shape"),
    (["-shape", "4c", "-churn", "0"], "invalid value for -churn"),
    (["-shape", "4x", "-churn", "3"], "shape '4x': unknown part '4x'"),
    (["-shape", "4c", "-churn", "3", "-policy", "nope"], "invalid value for -policy: unknown policy 'nope'"),
    (["-shape", "4c", "-churn", "3"], "policy none decides nothing"),
    (["-shape", "4c", "-pods", "/nonexistent/pods.yaml", "-policy", "static"], "cannot read pods file"),
    (["-topology", "/nonexistent/node.json", "-churn", "3", "-policy", "static"], "cannot read topology JSON"),
    (["-shape", "4c", "-dump", "/nonexistent/d.jsonl", "-policy", "static"], "cannot read dump /nonexistent/d.jsonl"),
    (["-shape", "4c", "-churn", "3", "-force-config", "/nonexistent/c.yaml"], "cannot read configuration file"),
])
def test_cli_errors_are_one_line_naming_the_input(capsys, args, says):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("cri-resmgr simulate: error: ") and says in err and err.count("\n") == 1


def test_replay_maps_recorded_ids_anywhere_in_a_request():
    from cri_resmgr._proto import runtime_v1_pb2 as pb

    m = pb.ListContainersRequest(filter=pb.ContainerFilter(id="old-c", pod_sandbox_id="old-p",
                                                           label_selector={"x": "old-c"}))
    map_ids(m, {"old-c": "new-c", "old-p": "new-p"})
    assert (m.filter.id, m.filter.pod_sandbox_id, m.filter.label_selector["x"]) == ("new-c", "new-p", "old-c")


def test_replay_refuses_a_socket_where_no_runtime_answers(tmp_path, capsys):
    dump = tmp_path / "d.jsonl"
    dump.write_text('{"time": null, "direction": "request", "service": "runtime.v1.RuntimeService", '
                    '"method": "RunPodSandbox", "call_id": 1, "body": {"config": {"log_directory": "%s"}}}\n'
                    % (tmp_path / "logs"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["replay", "-runtime-socket", str(tmp_path / "none.sock"), "-timeout", "1", str(dump)])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "does not answer Version" in err and err.count("\n") == 1
    assert not (tmp_path / "logs").exists()  # nothing made before a runtime answered
