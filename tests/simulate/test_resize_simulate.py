"""Resizes in `cri-resmgr simulate`: `resize` steps in -pods, resizes mixed into -churn,
every policy with the invariant checker after each call."""

from __future__ import annotations

import textwrap

import pytest

from cri_resmgr import cli
from cri_resmgr.config import Config, PolicyConfig
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.calls import WorkloadError
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.report import render_text
from cri_resmgr.simulate.shape import topology_of

POLICIES = [p.name for p in default_registry() if p.factory is not None]


def sized(cpu: str) -> str:
    return f"{{requests: {{cpu: '{cpu}', memory: 64Mi}}, limits: {{cpu: '{cpu}', memory: 64Mi}}}}"


PODS = textwrap.dedent(f"""
    - name: be
      containers: [{{name: c}}]
    - name: g
      containers: [{{name: c, resources: {sized('1500m')}}}]
    - resize: {{pod: g, container: c, resources: {sized('2')}}}
    - resize: {{pod: g, container: c, resources: {sized('16')}}}
    - resize: {{pod: g, container: c, resources: {sized('500m')}}}
""")


def test_resize_steps_move_the_container_and_a_refusal_moves_nothing():
    o = simulate(pod_calls(parse_pods(PODS, "p.yaml")), topology_of("1s/4c/2t"), Config(PolicyConfig(reserved_cpu=1)),
                 "static", default_registry())
    text = render_text(o, "p.yaml")
    assert "default/g:c: resized: exclusive CPUs" in text
    assert "failed, refused by the relay: cri-resmgr: cannot resize default/g:c to cpu request 16000m" in text
    assert "default/g:c: resized: shared CPUs 0-7" in text
    assert o.checker.count == 0


@pytest.mark.parametrize("item, says", [
    ("{resize: {pod: nope, container: c, resources: {requests: {cpu: 1}}}}", "no pod default/nope listed before it"),
    ("{resize: {pod: g, container: x, resources: {requests: {cpu: 1}}}}", "has no container 'x'"),
    ("{resize: {pod: g, container: c, resources: {requests: {cpu: 1}}}}", "from Guaranteed to Burstable"),
    ("{resize: {pod: g, container: c, cpus: 2}}", "unknown keys cpus"),
    ("{resize: [1]}", "expected {resize:"),
])
def test_bad_resize_steps_name_the_file_step_and_field(item, says):
    text = f"- name: g\n  containers: [{{name: c, resources: {sized('1')}}}]\n- {item}\n"
    with pytest.raises(WorkloadError) as e:
        parse_pods(text, "p.yaml")
    assert str(e.value).startswith("p.yaml: step 2") and says in str(e.value)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("shape", ["1s/4c/2t", "2s/2n/4c/2t"])
def test_every_policy_holds_its_invariants_with_resizes_in_the_churn(policy, shape):
    calls = churn_calls(150, seed=26, target=8, resizes=0.3)
    assert sum(c.method == "UpdateContainerResources" for c in calls) > 20
    o = simulate(calls, topology_of(shape), Config(PolicyConfig(reserved_cpu=1)), policy, default_registry(),
                 keep_steps=False, check_every=1)
    assert o.checker.count == 0, o.checker.violations[:3]
    assert o.policy_errors == 0


def test_churn_without_resizes_is_the_churn_it_was():
    assert [c.method for c in churn_calls(60, seed=3, target=6)] == \
        [c.method for c in churn_calls(60, seed=3, target=6, resizes=0.0)]
    assert "UpdateContainerResources" not in {c.method for c in churn_calls(60, seed=3, target=6)}


def test_simulate_command_resizes_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "-shape", "1s/4c/2t", "-policy", "static", "-churn", "40", "-resizes", "0.5", "-brief"])
    out = capsys.readouterr().out
    assert exit_.value.code in (0, None)
    assert "0.5 of the steps resizes" in out and "all hold" in out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "-shape", "1s/4c/2t", "-churn", "40", "-resizes", "2"])
    assert exit_.value.code == 2 and "-resizes" in capsys.readouterr().err
