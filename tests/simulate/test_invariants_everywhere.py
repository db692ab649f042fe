"""Every policy on every machine class of tests/topology, through the simulator with the
invariant checker on (issue 24): small churns, so it stays cheap; the big ones are in
`make bench`. Then each of the checker's newer invariants catching a policy that breaks it."""

from __future__ import annotations

import pytest

from cri_resmgr.config import Config, PolicyConfig, parse_document
from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.policy.api import Assignment, Decision, QoS, Resources, Workload
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.usage import PolicyUsage
from cri_resmgr.simulate.churn import churn_calls
from cri_resmgr.simulate.engine import simulate
from cri_resmgr.simulate.invariants import Checker
from cri_resmgr.simulate.recording import Event
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import Topology, discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.realsysfs import TREES, unpack
from tests.harness.sysfs_classes import CLASSES, write_machine
from tests.topology.shapes import SHAPES

POLICIES = [p.name for p in default_registry() if p.factory is not None]
# Discovered from generated sysfs trees (sparse_4096 is written only by its own test: 50k files)
# and built straight from the model (tests/topology/shapes.py, 512-CPU ones included).
MACHINES = [f"sysfs:{n}" for n in CLASSES if n != "sparse_4096"] + [f"shape:{n}" for n in SHAPES]


@pytest.fixture(scope="module")
def machines(tmp_path_factory) -> dict[str, Topology]:
    out: dict[str, Topology] = {}
    for name in MACHINES:
        kind, _, which = name.partition(":")
        if kind == "sysfs":
            root = tmp_path_factory.mktemp(which)
            write_machine(root, CLASSES[which]())
            out[name] = discover(root)
        else:
            out[name] = SHAPES[which]()
    return out


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("policy", POLICIES)
def test_policy_holds_the_invariants_on_machine(machines, policy, machine):
    topo = machines[machine]
    n = len(topo.online)
    reserved = 1 if n >= 8 else None
    out = simulate(churn_calls(30, seed=n, target=max(4, n // 2)), topo, Config(PolicyConfig(reserved_cpu=reserved)),
                   policy, default_registry(), keep_steps=False, check_every=10)
    assert out.checker.count == 0, out.checker.violations[:5]
    assert out.policy_errors == 0
    assert out.checker.full_passes >= 2


REAL = [tree.rsplit("/", 1)[1] for trees in TREES.values() for tree in trees]


@pytest.fixture(scope="module")
def real_machines(tmp_path_factory) -> dict[str, Topology]:
    out: dict[str, Topology] = {}
    for archive, trees in TREES.items():
        root = unpack(archive, tmp_path_factory.mktemp(archive.split(".")[0]))
        if root is None:
            pytest.skip("the real-machine sysfs dumps are not here (tests/harness/realsysfs.py)")
        for tree in trees:
            out[tree.rsplit("/", 1)[1]] = discover(root / tree)
    return out


@pytest.mark.parametrize("machine", REAL)
@pytest.mark.parametrize("policy", POLICIES)
def test_policy_holds_the_invariants_on_real_machine(real_machines, policy, machine):
    topo = real_machines[machine]
    out = simulate(churn_calls(30, seed=7, target=len(topo.online) // 2), topo,
                   Config(PolicyConfig(reserved_cpu=2)), policy, default_registry(), keep_steps=False,
                   check_every=10)
    assert out.checker.count == 0, out.checker.violations[:5]
    assert out.policy_errors == 0


def test_topology_aware_whole_cores_and_local_memory_on_the_real_snc_xeon(real_machines):
    # 2 sockets x 20 cores x 2 threads, 4 NUMA nodes of 20 CPUs, sibling of CPU N is N+40.
    # Shared containers ask 8 CPUs in each node, then 8-CPU Guaranteed ones come. Before:
    # each node kept its 8 highest ids for the shared ones (one thread of 8 cores), so the
    # exclusive CPUs split cores while whole ones were kept back.
    from cri_resmgr.simulate.pods import parse_pods, pod_calls
    topo = real_machines["2-socket-4-node-40-core"]
    pods = "".join(f"- name: burst{i}\n  containers: [{{name: c, resources: {{requests: {{cpu: 8}}, "
                   f"limits: {{cpu: 10, memory: 1G}}}}}}]\n" for i in range(4))
    pods += "".join(f"- name: g{i}\n  containers: [{{name: c, resources: {{limits: {{cpu: 8, memory: 1G}}}}}}]\n"
                    for i in range(2))
    out = simulate(pod_calls(parse_pods(pods, "pods.yaml")), topo, Config(PolicyConfig()),
                   "topology-aware", default_registry())
    assert out.warnings == [] and out.checker.count == 0, out.checker.violations
    held = [(out.policy.resources(k), a.exclusive) for k, a in out.policy.assignments().items() if a.exclusive]
    assert len(held) == 2
    for res, exclusive in held:
        assert all(topo.siblings(c) <= exclusive for c in exclusive), exclusive
        nodes = {topo.node_of(c) for c in exclusive}
        assert len(nodes) == 1 and res.cpuset_mems == str(min(nodes)), (exclusive, res)


# -- the invariants themselves, against a policy that breaks each -------------------------


class _Fixed:
    """A policy double holding given resources and exclusive CPUs; `pools`: CPUs its pools
    (a shared balloon) hold besides, which it cannot give exclusively."""

    def __init__(self, held: dict[str, tuple[Resources, CPUSet]], online: CPUSet, pools: CPUSet = CPUSet()) -> None:
        self.held, self.online, self.pools = held, online, pools

    def usage(self):
        exclusive = {k: e for k, (_, e) in self.held.items() if e}
        return PolicyUsage((), self.online - self.pools - CPUSet().union(*exclusive.values()), exclusive)

    def resources(self, key):
        return self.held[key][0] if key in self.held else None

    def assignment(self, key):
        return Assignment("x", self.held[key][1]) if key in self.held else None

    def assignments(self):
        return {k: Assignment("x", e) for k, (_, e) in self.held.items()}


def _event(key: str, res: Resources) -> Event:
    return Event("allocate", key, key, Decision(res), 0, None)


def _w(key: str, qos=QoS.GUARANTEED, cpu=2000) -> Workload:
    return Workload(key=key, namespace="default", pod=key, name="c", qos=qos, cpu_request=cpu)


def _run(topo: Topology, held: dict[str, tuple[Resources, CPUSet]], workloads: dict[str, Workload],
         pools: CPUSet = CPUSet()) -> list[str]:
    cache = Cache(None)
    checker = Checker(topo, topo.online, _Fixed(held, topo.online, pools), cache)
    for key, w in workloads.items():
        _admit(cache, key, w)
    for key, (res, _) in held.items():
        checker.after_call(f"create {key}", [_event(key, res)])
    return checker.violations


def _admit(cache: Cache, key: str, w: Workload) -> None:
    cache.add_container(ContainerRecord(key=key, pod_id=w.pod, name=w.name, workload=w))


SMT = "1s/4c/2t/interleaved"  # cores {0,4} {1,5} {2,6} {3,7}


def test_split_cores_while_a_whole_core_was_free_is_a_violation():
    topo = topology_of(SMT)
    bad = _run(topo, {"g": (Resources(CPUSet("0-1"), "0"), CPUSet("0-1"))}, {"g": _w("g")})
    assert any("split the cores" in v for v in bad), bad
    # Every core half taken: no whole core is left, but 0-3 could have been {0,4} and {1,5}.
    bad = _run(topo, {"g": (Resources(CPUSet("0-3"), "0"), CPUSet("0-3"))}, {"g": _w("g", cpu=4000)})
    assert any("split the cores" in v for v in bad), bad
    assert _run(topo, {"g": (Resources(CPUSet("0,4"), "0"), CPUSet("0,4"))}, {"g": _w("g")}) == []
    # An odd count splits one core whatever the policy does.
    assert _run(topo, {"g": (Resources(CPUSet("0-1,4"), "0"), CPUSet("0-1,4"))}, {"g": _w("g", cpu=3000)}) == []
    # Siblings exclusive to another container (placed first) are not free: taking the
    # leftover threads is right.
    held = {"b": (Resources(CPUSet("0-2,4-5"), "0"), CPUSet("0-2,4-5")),
            "a": (Resources(CPUSet("3,6"), "0"), CPUSet("3,6"))}
    assert _run(topo, held, {"a": _w("a"), "b": _w("b", cpu=5000)}) == []


def test_siblings_a_balloon_holds_are_not_free():
    # A shared balloon holds CPUs 4-5 (no container's exclusive CPUs: its members share
    # them): taking 0-1, their siblings, is packing leftovers, not a split, though cores
    # {2,6} and {3,7} are free. Before, the checker counted 4-5 as free and reported it.
    topo = topology_of(SMT)
    held = {"b": (Resources(CPUSet("4-5"), "0"), CPUSet()), "g": (Resources(CPUSet("0-1"), "0"), CPUSet("0-1"))}
    workloads = {"b": _w("b", QoS.BURSTABLE, 500), "g": _w("g")}
    assert _run(topo, held, workloads, pools=CPUSet("4-5")) == []
    # A real split is still one: the balloon holds other CPUs (3 and 7), 0-1 leave 4-5 free
    # while core {2,6} was free (named rather than {0,4}, which had 4 free as well).
    held["b"] = (Resources(CPUSet("3,7"), "0"), CPUSet())
    bad = _run(topo, held, workloads, pools=CPUSet("3,7"))
    assert any("default/g:c: exclusive CPUs 0-1 split the cores of CPUs 0-1 while core 2,6 was free" in v
               for v in bad), bad
    # The container's own thread of a core counts as free for it: taking 3 of {3,7} and 0-1
    # (leaving 4, 5 and 7 half used) while core {2,6} was free is a split.
    held = {"g": (Resources(CPUSet("0-1,3"), "0"), CPUSet("0-1,3"))}
    bad = _run(topo, held, {"g": _w("g", cpu=3000)}, pools=CPUSet())
    assert any("split the cores" in v for v in bad), bad


def test_an_other_given_new_exclusive_cpus_on_anothers_release_is_judged_by_them():
    # d (exclusive 0-1) is moved to 2-3 when x (exclusive 4-5) is released, as a dedicated
    # balloon regrows; s, shared, moves onto 0-1. Before, the checker judged s against
    # d's old CPUs and d against its old ones: 2 violations of nothing.
    topo = topology_of("1s/8c/1t")
    held = {"d": (Resources(CPUSet("0-1"), "0"), CPUSet("0-1")), "x": (Resources(CPUSet("4-5"), "0"), CPUSet("4-5")),
            "s": (Resources(CPUSet("2-3,6-7"), "0"), CPUSet())}
    cache = Cache(None)
    checker = Checker(topo, topo.online, _Fixed(held, topo.online), cache)
    for key, w in {"d": _w("d"), "x": _w("x"), "s": _w("s", QoS.BURSTABLE, 500)}.items():
        _admit(cache, key, w)
        checker.after_call(f"create {key}", [_event(key, held[key][0])])
    cache.containers["x"].released = True
    del held["x"]
    held["d"] = (Resources(CPUSet("2-3"), "0"), CPUSet("2-3"))
    held["s"] = (Resources(CPUSet("0-1,4-7"), "0"), CPUSet())
    moved = Decision(others={"s": held["s"][0], "d": held["d"][0]})
    checker.after_call("release x", [Event("release", "x", "x", moved, 0, None)])
    assert checker.violations == []
    # A real double booking among them is still one: s moved onto d's new CPUs.
    held["s"] = (Resources(CPUSet("0-3"), "0"), CPUSet())
    checker.after_call("move s", [Event("release", "y", "y", Decision(others={"s": held["s"][0]}), 0, None)])
    assert checker.violations == ["move s: default/s:c: cpuset 0-3 includes CPUs 2-3 exclusive to default/d:c"]


def test_balloons_churn_with_dedicated_balloons_reports_no_split_on_shared_balloons_cpus():
    # `cri-resmgr simulate -shape 1s/8c/2t -churn 2000 -resizes 0.3 -seed 1` with this
    # configuration: at call 1441 a resize gave ns0/churn-00182:c0 CPUs 1,3,6,15, and the
    # checker reported a split "while core 2-3 was free": CPU 2 was the default balloon's.
    config = parse_document(
        "policy:\n  Active: balloons\n  ReservedResources: {CPU: \"cpuset:0\"}\n  balloons:\n"
        "    BalloonTypes:\n"
        "      - {Name: dedicated, PreferNewBalloons: true,\n"
        "         MatchExpressions: [{key: qosclass, operator: In, values: [Guaranteed]}]}\n"
        "      - {Name: batch, Namespaces: [batch]}\n", "config.yaml", default_registry().names())
    o = simulate(churn_calls(2000, 1, 8, 0.3), topology_of("1s/8c/2t"), config, "balloons", default_registry(),
                 keep_steps=False)
    assert o.policy_errors == 0
    assert o.checker.count == 0, o.checker.violations


def test_memory_away_from_the_cpus_nodes_is_a_violation():
    topo = topology_of("2s/2c/1t")  # node 0: CPUs 0-1, node 1: CPUs 2-3
    bad = _run(topo, {"b": (Resources(CPUSet("0-1"), "1"), CPUSet())}, {"b": _w("b", QoS.BESTEFFORT, 0)})
    assert any("leaves out the memory of node(s) 0" in v for v in bad), bad
    assert _run(topo, {"b": (Resources(CPUSet("0-1"), "0-1"), CPUSet())}, {"b": _w("b", QoS.BESTEFFORT, 0)}) == []


def test_a_guaranteed_container_sharing_cpus_when_the_requests_fit_is_a_violation():
    topo = topology_of("1s/4c/1t")
    bad = _run(topo, {"g": (Resources(CPUSet("0-3"), "0"), CPUSet())}, {"g": _w("g")})
    assert any("although the requests fit" in v for v in bad), bad
    # 3 + 2 CPUs of Guaranteed requests on 4 CPUs do not fit: no violation for the second.
    held = {"a": (Resources(CPUSet("0-2"), "0"), CPUSet("0-2")), "b": (Resources(CPUSet("3"), "0"), CPUSet())}
    assert _run(topo, held, {"a": _w("a", cpu=3000), "b": _w("b")}) == []
