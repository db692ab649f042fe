"""Which balloon a container goes to, as users of CRI Resource Manager and nri-plugins
expect it (issue 24, fault 7), through `cri-resmgr simulate`."""

from __future__ import annotations

from balloons_sim import run

from cri_resmgr.topology.cpuset import CPUSet

CONFIG = """
policy:
  Active: balloons
  ReservedResources: {CPU: 1}
  balloons:
    BalloonTypes:
      - Name: two-cpu
        MinCPUs: 2
        MaxCPUs: 2
        PreferNewBalloons: true
      - Name: ready
        MinBalloons: 2
        MinCPUs: 1
        PreferNewBalloons: true
      - Name: four-cpu
        MinCPUs: 4
        MaxCPUs: 8
        MinBalloons: 1
      - Name: five-cpu
        MaxCPUs: 5
        PreferSpreadingPods: true
        PreferNewBalloons: true
"""


def pod(name: str, balloon: str, n: int, cpu: str | None) -> str:
    res = f"{{requests: {{cpu: {cpu}}}, limits: {{cpu: {cpu}}}}}" if cpu else "{}"
    containers = ", ".join(f"{{name: c{i}, resources: {res}}}" for i in range(n))
    return (f"- {{name: {name}, annotations: {{balloon.balloons.cri-resource-manager.intel.com: {balloon}}}, "
            f"containers: [{containers}]}}\n")


def test_prefer_new_balloons_still_packs_the_containers_of_one_pod():
    _, at = run(CONFIG, pod("p1", "two-cpu", 2, "100m") + pod("p2", "two-cpu", 1, "100m"), "2s/4n/4c/2t")
    assert at["p1:c0"].balloon == at["p1:c1"].balloon == "two-cpu[0]"
    assert len(at["p1:c0"].cpus) == 2
    assert at["p2:c0"].balloon == "two-cpu[1]" and at["p2:c0"].cpus.isdisjoint(at["p1:c0"].cpus)


def test_prefer_new_balloons_fills_the_empty_min_balloons_first():
    o, at = run(CONFIG, pod("be", "ready", 1, None) + pod("b2", "ready", 1, None) + pod("b3", "ready", 1, None),
                "2s/4n/4c/2t")
    assert [at[f"{p}:c0"].balloon for p in ("be", "b2", "b3")] == ["ready[0]", "ready[1]", "ready[2]"]
    # the empty ones it filled are the MinBalloons ones, on the CPUs they were made with
    first = {e.container: e for s in o.steps for e in s.events}
    assert first["default/be:c0"].assignment.pool == "ready[0]"


def test_a_pod_fills_its_balloon_then_opens_another():
    # 3 containers of 3 CPUs: two share the MinBalloons balloon (6 of its 8), the third opens a new one
    _, at = run(CONFIG, pod("p", "four-cpu", 3, "3"), "2s/4n/4c/2t")
    assert at["p:c0"].cpus == at["p:c1"].cpus and len(at["p:c0"].cpus) == 6
    assert at["p:c2"].balloon == "four-cpu[1]" and len(at["p:c2"].cpus) == 4
    assert at["p:c2"].cpus.isdisjoint(at["p:c0"].cpus)


def test_spreading_pods_with_new_balloons_gives_each_container_its_own():
    _, at = run(CONFIG, pod("p", "five-cpu", 3, "1250m"), "2s/4n/4c/2t")
    sets = [at[f"p:c{i}"].cpus for i in range(3)]
    assert [len(s) for s in sets] == [2, 2, 2]
    assert CPUSet().union(*sets).__len__() == 6


def test_without_prefer_new_the_balloon_with_most_room_is_filled():
    cfg = """
    policy:
      Active: balloons
      ReservedResources: {CPU: 1}
      balloons:
        BalloonTypes:
          - {Name: pair, MaxCPUs: 1, MaxBalloons: 2}
    """
    pods = pod("a", "pair", 1, "800m") + pod("b", "pair", 1, "600m") + pod("c", "pair", 1, "300m")
    _, at = run(cfg, pods, "1s/4c/2t")
    assert at["a:c0"].balloon == "pair[0]"
    assert at["b:c0"].balloon == "pair[0]" or at["b:c0"].balloon == "pair[1]"
    # c fits only beside b (800m + 300m > 1 CPU): the balloon with room
    assert at["c:c0"].balloon == at["b:c0"].balloon != at["a:c0"].balloon
