"""policy/restore.py: the one restore procedure, checked once for every policy that plugs
into it (each policy's own rules of what may be kept are in its own restore tests)."""

from __future__ import annotations

import pytest

from cri_resmgr.policy.api import Assignment, Decision, PolicyError, QoS, Resources, Workload
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.restore import Rules, restore
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.sysfs import fake_topology

POLICIES = ("static", "static-plus", "topology-aware", "balloons")
# balloons: the dpdk containers go to dp balloons of at most 4 CPUs each.
OPTIONS = {"balloons": {"BalloonTypes": [{"Name": "dp", "Namespaces": ["dpdk"], "MaxCPUs": 4}]},
           "topology-aware": {"UnlimitedBurstable": "none"}}


@pytest.fixture(scope="module")
def topo():
    return fake_topology(sockets=2, cores_per_die=4, numa_per_socket=2)  # 16 CPUs, nodes of 4


def build(name, topo, available=None):
    info = default_registry().lookup(name)
    return info.factory(build_context(topo, reserved="cpuset:0", available=available,
                                      options=OPTIONS.get(name, {})))


def big(key):
    """A container that gets 4 CPUs of its own under every policy (a dp balloon of 4)."""
    return Workload(key=key, namespace="dpdk", pod=f"pod-{key}", name=key, qos=QoS.GUARANTEED,
                    cpu_request=4000, cpu_limit=4000)


def small(key):
    return Workload(key=key, namespace="default", pod=f"pod-{key}", name=key, qos=QoS.BESTEFFORT)


def running(name, topo):
    """A policy on all 16 CPUs running three 4-CPU containers and a BestEffort one, and what
    it would hand to its successor."""
    ws = [big("g0"), big("g1"), big("g2"), small("be")]
    policy = build(name, topo)
    for w in ws:
        assert not policy.allocate(w).warning
    return ws, dict(policy.assignments())


@pytest.mark.parametrize("name", POLICIES)
def test_a_container_listed_twice_is_refused_and_nothing_changes(name, topo):
    policy = build(name, topo)
    policy.allocate(small("x"))
    before = dict(policy.assignments())
    with pytest.raises(PolicyError, match=f"{name}: restore lists containers more than once: a, b"):
        policy.restore([(small("a"), None), (small("b"), None), (small("a"), None), (small("b"), None)])
    assert dict(policy.assignments()) == before


@pytest.mark.parametrize("name", POLICIES)
def test_round_trip_keeps_everything_and_reports_every_container(name, topo):
    ws, saved = running(name, topo)
    new = build(name, topo)
    d = new.restore([(w, Assignment.from_json(saved[w.key].to_json())) for w in ws])
    assert d.warning is None and d.resources is None
    assert dict(new.assignments()) == saved
    assert set(d.others) == {w.key for w in ws}
    assert all(d.others[w.key] == new.resources(w.key) for w in ws)


@pytest.mark.parametrize("name", POLICIES)
def test_a_reconfiguration_the_running_containers_do_not_fit_is_refused_live(name, topo):
    ws, saved = running(name, topo)
    new = build(name, topo, available="cpuset:0-7")  # 7 CPUs besides the reserved one: room for one
    new.allocate(small("x"))
    before = {k: (a, new.resources(k)) for k, a in new.assignments().items()}
    with pytest.raises(PolicyError, match=fr"{name}: refused, the running containers do not fit: .*\(g\d\)") as e:
        new.restore([(w, saved[w.key]) for w in ws], live=True)
    assert "(be)" not in str(e.value), "only those that lose something are named"
    assert "(its saved placement: " in str(e.value), "why it could not stay where it was"
    assert {k: (a, new.resources(k)) for k, a in new.assignments().items()} == before, "nothing changed"
    # The same from the state file (a restart with the new configuration): the relay must
    # serve, so everything is placed best-effort and the warning names who lost what.
    again = build(name, topo, available="cpuset:0-7")
    d = again.restore([(w, saved[w.key]) for w in ws])
    assert str(e.value).split(": ", 2)[2] in d.warning
    assert set(d.others) == {w.key for w in ws}
    assert all(r.cpuset_cpus.issubset(CPUSet("0-7")) for r in d.others.values())


@pytest.mark.parametrize("name", POLICIES)
def test_a_reconfiguration_that_fits_is_applied_live(name, topo):
    ws, saved = running(name, topo)
    new = build(name, topo, available="cpuset:0-13")  # 13 besides the reserved: all fit
    d = new.restore([(w, saved[w.key]) for w in ws], live=True)
    assert set(d.others) == {w.key for w in ws}
    assert all(r.cpuset_cpus.issubset(CPUSet("0-13")) for r in d.others.values())


@pytest.mark.parametrize("name", POLICIES)
def test_a_policy_switch_hands_over_no_assignments_and_refuses_nothing(name, topo):
    # The engine passes assignments only to a policy of the same name: a switch is live
    # with none, every container placed as new (best-effort when they do not fit).
    ws = [big("g0"), big("g1"), big("g2"), small("be")]
    new = build(name, topo, available="cpuset:0-7")
    d = new.restore([(w, None) for w in ws], live=True)
    assert set(d.others) == {w.key for w in ws} and d.warning


@pytest.mark.parametrize("name", POLICIES)
def test_a_saved_assignment_the_policy_cannot_use_is_placed_anew(name, topo):
    # Not one of the policy's own (each policy's tests have its rules of what holds).
    foreign = Assignment("elsewhere", CPUSet("1-4"), {"balloon": "x"})
    new = build(name, topo)
    d = new.restore([(big("g"), foreign), (small("be"), foreign)])
    assert d.warning is None, "it got all it asks for: nothing lost"
    assert dict(new.assignments())["g"] != foreign and len(d.others["g"].cpuset_cpus) >= 4
    assert set(d.others) == {"g", "be"}


# -- the procedure's steps and order, by rules that record what they are asked --------------


class Recorder(Rules):
    """Rules for a make-believe policy: `ok` saved assignments are kept; the container with
    `lose` in its key loses what it had; the order of every call is recorded."""

    name = "recorder"

    def __init__(self, live_state: list[str]) -> None:
        self.calls: list[str] = []
        self.state = live_state  # the "book": keys placed

    def reset(self):
        before = list(self.state)
        self.state.clear()
        self.calls.append("reset")

        def undo():
            self.calls.append("undo")
            self.state[:] = before
        return undo

    def keep_rank(self, w, saved):
        return int(saved.details.get("rank", 0))

    def validate(self, w, saved):
        self.calls.append(f"validate {w.key}")
        return None if saved is not None and saved.pool == "ok" else "not ok"

    def keep(self, w, saved):
        self.calls.append(f"keep {w.key}")
        self.state.append(w.key)

    def settle(self):
        self.calls.append("settle")
        return ["settled"]

    def place_rank(self, w):
        return -w.cpu_request

    def lost(self, w, saved):
        return f"{w} ({w.key}) lost it" if "lose" in w.key else None

    def unmet(self):
        return ["a promise"] if "lose" in "".join(self.state) else []


class Placing:
    """The policy side: allocate() places and records, resources() reports."""

    def __init__(self, rules: Recorder) -> None:
        self.rules = rules

    def allocate(self, w):
        self.rules.calls.append(f"place {w.key}")
        self.rules.state.append(w.key)
        return Decision(warning=f"placed {w.key}" if w.cpu_request else None)

    def resources(self, key):
        return Resources(CPUSet([len(key)])) if key in self.rules.state else None


def _w(key, cpu=0):
    return Workload(key=key, namespace="ns", pod="p", name=key, qos=QoS.BURSTABLE, cpu_request=cpu)


def test_the_steps_in_their_order():
    rules = Recorder(["old"])
    items = [(_w("a"), Assignment("ok", details={"rank": 1})), (_w("b", 100), None), (_w("c"), Assignment("ok")),
             (_w("d", 200), Assignment("bad")), (_w("e"), Assignment("ok", details={"rank": 1}))]
    d = restore(Placing(rules), rules, items)
    # Kept lowest keep_rank first (those without an assignment too, never kept), then
    # settled, then the pending placed lowest place_rank first.
    assert rules.calls == ["reset", "validate b", "validate c", "keep c", "validate d", "validate a", "keep a",
                           "validate e", "keep e", "settle", "place d", "place b"]
    assert d.warning == "settled; placed d; placed b"
    assert set(d.others) == {"a", "b", "c", "d", "e"} and d.resources is None


def test_what_is_lost_refuses_a_live_restore_naming_why_the_saved_one_was_not_kept():
    rules = Recorder(["old"])
    items = [(_w("keep-lose"), Assignment("ok")), (_w("lose"), Assignment("bad")), (_w("fine"), Assignment("bad"))]
    with pytest.raises(PolicyError) as e:
        restore(Placing(rules), rules, items, live=True)
    assert str(e.value) == ("recorder: refused, the running containers do not fit: "
                            "ns/p:keep-lose (keep-lose) lost it; ns/p:lose (lose) lost it (its saved placement: not ok); "
                            "a promise")
    assert rules.calls[-1] == "undo" and rules.state == ["old"]
    # At start-up the same is said in the warning, after the placements'.
    rules = Recorder(["old"])
    d = restore(Placing(rules), rules, items)
    assert d.warning == ("settled; ns/p:keep-lose (keep-lose) lost it; ns/p:lose (lose) lost it "
                         "(its saved placement: not ok); a promise")
    assert "undo" not in rules.calls and sorted(rules.state) == ["fine", "keep-lose", "lose"]


def test_a_failure_midway_puts_back_what_was_in_force():
    rules = Recorder(["old"])

    class Failing(Placing):
        def allocate(self, w):
            raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        restore(Failing(rules), rules, [(_w("a"), Assignment("ok")), (_w("b"), None)])
    assert rules.state == ["old"] and rules.calls[-1] == "undo"
