"""Guaranteed containers of a type that gives pods their own balloons (PreferNewBalloons)
run on CPUs no other pod's container uses whenever kubelet admitted them (the requests
fit the allocatable CPUs): other balloons' slack gives way (issue 24, fault 9)."""

from __future__ import annotations

from balloons_sim import run

from cri_resmgr.config import parse_document
from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.balloons import BalloonsPolicy
from cri_resmgr.policy.balloons import policy as balloons_policy
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.pods import parse_pods, pod_calls
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology.cpuset import CPUSet

# 8 CPUs, CPU 0 reserved: 7 allocatable
SHAPE = "1s/4c/2t"
CONFIG = """
policy:
  Active: balloons
  ReservedResources: {CPU: "cpuset:0"}
  balloons:
    BalloonTypes:
      - Name: dedicated
        MatchExpressions: [{key: qosclass, operator: In, values: [Guaranteed]}]
        PreferNewBalloons: true
      - Name: batch
        Namespaces: [batch]
"""


def pod(name: str, cpu: str | None, namespace: str = "default", qos: str = "guaranteed") -> str:
    if cpu is None:
        res = "{}"
    elif qos == "guaranteed":
        res = f"{{requests: {{cpu: {cpu}, memory: 64Mi}}, limits: {{cpu: {cpu}, memory: 64Mi}}}}"
    else:
        res = f"{{requests: {{cpu: {cpu}}}}}"
    return f"- {{name: {name}, namespace: {namespace}, containers: [{{name: c, resources: {res}}}]}}\n"


def assert_isolated(at: dict, guaranteed: list[str]) -> None:
    for g in guaranteed:
        mine = at[g].cpus
        for other, placed in at.items():
            if other != g:
                assert mine.isdisjoint(placed.cpus), f"{g} on {mine} shares with {other} on {placed.cpus}"


def test_the_shared_balloons_cpu_moves_for_the_last_admitted_guaranteed_pod():
    # a BestEffort pod first (its balloon takes a CPU for 0m), then 2 + 2 + 3 = 7 CPUs Guaranteed
    text = pod("be", None) + pod("g1", "2") + pod("g2", "2") + pod("g3", "3")
    o, at = run(CONFIG, text, SHAPE)
    assert [len(at[g].cpus) for g in ("g1:c", "g2:c", "g3:c")] == [2, 2, 3]
    assert_isolated(at, ["g1:c", "g2:c", "g3:c"])
    assert at["be:c"].cpus == CPUSet("0")  # on the reserved CPU until CPUs free up
    assert {at[g].balloon for g in ("g1:c", "g2:c", "g3:c")} == {"dedicated[0]", "dedicated[1]", "dedicated[2]"}
    assert any("moved CPUs" in w and "default[0]" in w for w in o.warnings), o.warnings
    assert o.checker.count == 0


def test_rounding_of_fractional_balloons_gives_way_too():
    # 0m + 500m + 2 + 2 + 2 = 6.5 CPUs requested of 7; rounded up per balloon they were 8
    text = pod("be", None) + pod("bu", "500m", "batch", qos="burstable") + pod("g1", "2") + pod("g2", "2") + \
        pod("g3", "2")
    _, at = run(CONFIG, text, SHAPE)
    assert_isolated(at, ["g1:c", "g2:c", "g3:c"])
    assert all(len(at[g].cpus) == 2 for g in ("g1:c", "g2:c", "g3:c"))
    assert len(at["bu:c"].cpus - CPUSet("0")) == 1  # the Burstable one keeps its CPU: the 0m one gave way


def test_a_fractional_guaranteed_pod_short_of_cpus_does_not_enter_a_dedicated_balloon():
    # 0m + 2 + 2 + 2 + 500m = 6.5 CPUs of 7: kubelet admits all. The 500m one is no dedicated
    # container (not whole CPUs) and no CPU is free: best-effort beside the BestEffort pod,
    # never on g1's CPUs (run() fails on the simulator's isolation check too).
    text = pod("be", None) + pod("g1", "2") + pod("g2", "2") + pod("g3", "2") + pod("frac", "500m")
    o, at = run(CONFIG, text, SHAPE)
    assert_isolated(at, ["g1:c", "g2:c", "g3:c"])
    assert at["frac:c"].balloon == at["be:c"].balloon == "default[0]"
    assert any("default/frac:c" in w and "best-effort" in w for w in o.warnings), o.warnings


def test_a_fractional_guaranteed_pod_does_not_inflate_a_dedicated_balloon():
    # MinCPUs 2: the one CPU left is too few for a new balloon, but enough to inflate g1's
    # (2000m + 500m on 3 CPUs): the 500m pod must not join it (0 + 500m + 2 + 2 + 500m of 7).
    config = CONFIG.replace("PreferNewBalloons: true", "PreferNewBalloons: true\n        MinCPUs: 2")
    text = pod("be", None) + pod("bu", "500m", "batch", qos="burstable") + pod("g1", "2") + pod("g2", "2") + \
        pod("frac", "500m")
    o, at = run(config, text, SHAPE)
    assert_isolated(at, ["g1:c", "g2:c"])
    assert len(at["g1:c"].cpus) == len(at["g2:c"].cpus) == 2
    assert any("default/frac:c" in w and "best-effort" in w for w in o.warnings), o.warnings


def test_when_the_requests_do_not_fit_a_guaranteed_pod_does_not_enter_anothers_balloon():
    text = pod("g1", "3") + pod("g2", "3") + pod("g3", "2")  # 8 CPUs of 7
    o, at = run(CONFIG, text, SHAPE)
    assert at["g3:c"].balloon not in (at["g1:c"].balloon, at["g2:c"].balloon)
    assert at["g1:c"].cpus.isdisjoint(at["g3:c"].cpus) and at["g2:c"].cpus.isdisjoint(at["g3:c"].cpus)
    assert any("default/g3:c" in w for w in o.warnings)


def wl(key: str, cpu: int, qos: QoS = QoS.BESTEFFORT, namespace: str = "default") -> Workload:
    return Workload(key=key, namespace=namespace, pod=f"pod-{key}", name="c", qos=qos, cpu_request=cpu)


def test_the_moved_cpus_come_back_when_the_guaranteed_pod_goes():
    topo = topology_of(SHAPE)
    types = [{"Name": "dedicated", "MatchExpressions": [{"key": "qosclass", "operator": "In",
                                                          "values": ["Guaranteed"]}], "PreferNewBalloons": True}]
    p = BalloonsPolicy(build_context(topo, reserved="cpuset:0", options={"BalloonTypes": types}))
    p.allocate(wl("be", 0))
    for key, cpu in (("g1", 2000), ("g2", 2000)):
        p.allocate(wl(key, cpu, qos=QoS.GUARANTEED))
    d = p.allocate(wl("g3", 3000, qos=QoS.GUARANTEED))
    assert d.others["be"].cpuset_cpus == CPUSet("0") and "moved CPUs" in (d.warning or "")
    assert p.assignment("be").details.get("short")  # recorded as placed best-effort
    d = p.release("g3")
    assert len(p.balloon_of("be").cpus) == 1 and d.others["be"].cpuset_cpus == p.balloon_of("be").cpus
    # a fractional Guaranteed container is not dedicated: it does not take the slack of others
    p.allocate(wl("g3", 3000, qos=QoS.GUARANTEED))
    d = p.allocate(wl("frac", 1500, qos=QoS.GUARANTEED))
    assert "moved CPUs" not in (d.warning or "") and "placed best-effort" in (d.warning or "")


def test_the_simulators_isolation_check_holds_balloons_to_it(monkeypatch):
    """The invariant is on for balloons: with the CPUs not moved (the fault), it says so."""

    monkeypatch.setattr(balloons_policy, "reclaim", lambda book, units, keep=None: (set(), []))
    text = pod("be", None) + pod("g1", "2") + pod("g2", "2") + pod("g3", "3")
    registry = default_registry()
    o = simulate(pod_calls(parse_pods(text, "p.yaml")), topology_of(SHAPE),
                 parse_document(CONFIG, "c.yaml", registry.names()), "balloons", registry)
    assert o.checker.count >= 1
    assert any("default/g3:c" in v and "although the requests fit" in v for v in o.checker.violations), \
        o.checker.violations


def test_a_dedicated_containers_pod_mates_get_balloons_of_their_own():
    text = ("- {name: two, containers: [{name: a, resources: {limits: {cpu: 2, memory: 64Mi}}}, "
            "{name: b, resources: {limits: {cpu: 2, memory: 64Mi}}}, {name: s, resources: {limits: "
            "{cpu: 500m, memory: 64Mi}}}]}\n")
    _, at = run(CONFIG, text, SHAPE)
    assert at["two:a"].balloon != at["two:b"].balloon and at["two:a"].cpus.isdisjoint(at["two:b"].cpus)
    # the fractional one is not dedicated: packed with its pod as the references do
    assert at["two:s"].balloon in (at["two:a"].balloon, at["two:b"].balloon) or \
        at["two:s"].balloon.startswith("dedicated")


HIDING = """
policy:
  Active: balloons
  ReservedResources: {CPU: "cpuset:0"}
  balloons:
    BalloonTypes:
      - Name: dedicated
        MatchExpressions: [{key: qosclass, operator: In, values: [Guaranteed]}]
        PreferNewBalloons: true
      - Name: ht
        Namespaces: [ht]
        HideHyperthreads: true
"""


def test_a_hidehyperthreads_balloons_whole_cores_are_no_room_for_a_dedicated_container():
    # The ht balloon holds two whole cores (2-5) for 1500m; 4 + 2 CPUs of requests fit the
    # 7 allocatable CPUs, but only 3 CPUs are in no balloon: the dedicated container is placed
    # short by design (the policy reclaims nothing from such a balloon). The checker counted
    # the hidden threads as room and reported it; the policy's usage tells them.
    text = pod("h", "1500m", "ht", qos="burstable") + pod("g", "4")
    o, at = run(HIDING, text, SHAPE)
    assert len(at["h:c"].cpus) == 2 and len(at["g:c"].cpus) == 3


def test_a_min_cpus_balloons_cpus_are_needed_too():
    # MinCPUs keeps 4 CPUs for a BestEffort container: with them the requests do not fit
    # (8000m of 7000m), so the Guaranteed container short of a CPU is no violation. Before
    # usage() told a balloon's floor (PoolUsage.kept), the checker reported it and could
    # only name the balloon holding CPUs beyond its requests.
    config = CONFIG.replace("Namespaces: [batch]", "Namespaces: [batch]\n        MinCPUs: 4")
    registry = default_registry()
    cfg = parse_document(config, "config.yaml", registry.names())
    text = pod("be", None, "batch") + pod("g", "4")
    o = simulate(pod_calls(parse_pods(text, "pods.yaml")), topology_of(SHAPE), cfg, "balloons", registry)
    assert o.checker.violations == []
    assert [p.kept for p in o.policy.usage().pools if p.name == "batch[0]"] == [4]
    assert len(o.policy.resources(next(k for k, c in o.cache.containers.items() if c.workload.pod == "g"))
               .cpuset_cpus) == 3
