"""Balloon types from configuration: defaults, built-in types, and errors naming the key."""

from __future__ import annotations

import pytest
from balloons_testkit import policy

from cri_resmgr.policy.balloons.types import parse_config
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.registry import default_registry
from tests.topology.shapes import machine


def test_registered_under_its_name():
    info = default_registry().lookup("balloons")
    assert info.factory is not None and "balloon" in info.description


def test_builtin_types_exist_and_come_first_and_last():
    c = parse_config({"BalloonTypes": [{"Name": "a", "Namespaces": ["x"]}, {"Name": "b"}]})
    assert [t.name for t in c.types] == ["reserved", "a", "b", "default"]
    default = c.default
    assert (default.min_balloons, default.max_balloons, default.min_cpus) == (1, 1, 0)
    assert c.reserved_namespaces == ("kube-system",)


def test_all_type_options_parse():
    c = parse_config({"PinMemory": False, "ReservedPoolNamespaces": ["kube-*"], "BalloonTypes": [{
        "Name": "dp", "Namespaces": "dpdk", "MatchExpressions": [{"key": "app", "operator": "In",
                                                                   "values": ["upf"]}],
        "MinCPUs": 2, "MaxCPUs": 8, "MinBalloons": 1, "MaxBalloons": 2, "AllocatorPriority": "high",
        "PreferSpreadingPods": True, "PreferNewBalloons": "true", "PreferPerNamespaceBalloon": True,
        "ShareIdleCPUsInSame": "L3cache", "HideHyperthreads": True, "CpuClass": "turbo"}]})
    t = c.type("dp")
    assert t.namespaces == ("dpdk",) and len(t.match) == 1
    assert (t.min_cpus, t.max_cpus, t.min_balloons, t.max_balloons) == (2, 8, 1, 2)
    assert t.priority == "performance" and t.spread_pods and t.prefer_new and t.per_namespace
    assert t.share_idle == "l3cache" and t.hide_hyperthreads and t.cpu_class == "turbo"
    assert t.pin_memory is False  # the policy-wide default
    assert c.reserved_namespaces == ("kube-*",)


def test_zero_max_means_unlimited():
    t = parse_config({"BalloonTypes": [{"Name": "a", "MaxCPUs": 0, "MaxBalloons": 0}]}).type("a")
    assert t.max_cpus is None and t.max_balloons is None


def test_configured_default_and_reserved():
    c = parse_config({"BalloonTypes": [{"Name": "default", "MaxCPUs": 4, "ShareIdleCPUsInSame": "system"},
                                       {"Name": "reserved", "Namespaces": ["monitoring"]}]})
    assert c.default.max_cpus == 4 and c.default.max_balloons == 1 and c.default.share_idle == "system"
    assert c.reserved.namespaces == ("monitoring",) and c.reserved.max_balloons == 1
    assert [t.name for t in c.types] == ["reserved", "default"]


@pytest.mark.parametrize("options, key", [
    ({"BalloonTipes": []}, "policy.balloons.BalloonTipes"),
    ({"BalloonTypes": [], "balloontypes": []}, "policy.balloons.balloontypes: given twice"),
    ({"BalloonTypes": {"Name": "a"}}, "policy.balloons.BalloonTypes:"),
    ({"BalloonTypes": ["a"]}, "policy.balloons.BalloonTypes[0]:"),
    ({"BalloonTypes": [{"Namespaces": ["x"]}]}, "policy.balloons.BalloonTypes[0].Name"),
    ({"BalloonTypes": [{"Name": "a b"}]}, "policy.balloons.BalloonTypes[0].Name"),
    ({"BalloonTypes": [{"Name": "a"}, {"Name": "a"}]}, "policy.balloons.BalloonTypes[1].Name"),
    ({"BalloonTypes": [{"Name": "a", "MinCpu": 1}]}, "policy.balloons.BalloonTypes[0].MinCpu"),
    ({"BalloonTypes": [{"Name": "a", "PreferNewBalloon": True}]}, "policy.balloons.BalloonTypes[0].PreferNewBalloon"),
    ({"BalloonTypes": [{"Name": "a", "AllocatorPriority": 4}]}, "policy.balloons.BalloonTypes[0].AllocatorPriority"),
    ({"BalloonTypes": [{"Name": "a", "PreferSpreadOnPhysicalCores": "both"}]},
     "policy.balloons.BalloonTypes[0].PreferSpreadOnPhysicalCores"),
    ({"AllocatorTopologyBalancing": 1}, "policy.balloons.AllocatorTopologyBalancing"),
    ({"BalloonTypes": [{"Name": "reserved", "AllocatorTopologyBalancing": True}]},
     "policy.balloons.BalloonTypes[0].AllocatorTopologyBalancing"),
    ({"BalloonTypes": [{"Name": "a", "MinCPUs": -1}]}, "policy.balloons.BalloonTypes[0].MinCPUs"),
    ({"BalloonTypes": [{"Name": "a", "MinCPUs": "2"}]}, "policy.balloons.BalloonTypes[0].MinCPUs"),
    ({"BalloonTypes": [{"Name": "a", "MinCPUs": 4, "MaxCPUs": 2}]}, "policy.balloons.BalloonTypes[0].MaxCPUs"),
    ({"BalloonTypes": [{"Name": "a", "MinBalloons": 3, "MaxBalloons": 2}]},
     "policy.balloons.BalloonTypes[0].MaxBalloons"),
    ({"BalloonTypes": [{"Name": "a", "AllocatorPriority": "fast"}]},
     "policy.balloons.BalloonTypes[0].AllocatorPriority"),
    ({"BalloonTypes": [{"Name": "a", "ShareIdleCPUsInSame": "rack"}]},
     "policy.balloons.BalloonTypes[0].ShareIdleCPUsInSame"),
    ({"BalloonTypes": [{"Name": "a", "HideHyperthreads": "yes"}]},
     "policy.balloons.BalloonTypes[0].HideHyperthreads"),
    ({"BalloonTypes": [{"Name": "a", "MatchExpressions": [{"key": "x", "operator": "Bogus"}]}]},
     "policy.balloons.BalloonTypes[0].MatchExpressions[0].operator"),
    ({"BalloonTypes": [{"Name": "a", "Namespaces": [1]}]}, "policy.balloons.BalloonTypes[0].Namespaces"),
    ({"BalloonTypes": [{"Name": "reserved", "MinCPUs": 2}]}, "policy.balloons.BalloonTypes[0].MinCPUs"),
    ({"PinMemory": "maybe"}, "policy.balloons.PinMemory"),
    ({"ReservedPoolNamespaces": [""]}, "policy.balloons.ReservedPoolNamespaces"),
])
def test_bad_options_name_the_key(options, key):
    with pytest.raises(ConfigValueError) as e:
        parse_config(options)
    assert str(e.value).startswith(key), str(e.value)


def test_keys_are_read_as_the_references_read_them_whatever_their_case():
    # CRI-RM's e2e configurations write ShareIdleCpusInSame and CPUClass, nri-plugins camelCase
    config = parse_config({"preferSpreadOnPhysicalCores": True, "balloonTypes": [
        {"name": "a", "minCPUs": 2, "ShareIdleCpusInSame": "numa", "CPUClass": "turbo", "AllocatorPriority": 0},
        {"Name": "b", "PreferSpreadOnPhysicalCores": False, "AllocatorPriority": 2}]})
    a, b = config.type("a"), config.type("b")
    assert a.min_cpus == 2 and a.share_idle == "numa" and a.cpu_class == "turbo" and a.priority == "performance"
    assert a.spread_cores and not b.spread_cores and b.priority == "efficiency"
    assert config.default.spread_cores and not config.default.balance


def test_minimums_that_cannot_fit_are_refused():
    topo = machine(cores=4, threads=2)  # 8 CPUs, 1 reserved: 7 for balloons
    with pytest.raises(ConfigValueError, match=r"policy.balloons.BalloonTypes: .* need 8 CPUs but only 7"):
        policy(topo, [{"Name": "a", "MinCPUs": 4, "MinBalloons": 2}])
    # HideHyperthreads counts cores: 2 balloons x 2 cores x 2 threads = 8 CPUs.
    with pytest.raises(ConfigValueError, match="need 8 CPUs"):
        policy(topo, [{"Name": "a", "MinCPUs": 2, "MinBalloons": 2, "HideHyperthreads": True}])


def test_all_cpus_reserved_is_refused():
    with pytest.raises(ConfigValueError, match="policy.ReservedResources.CPU"):
        policy(machine(cores=1, threads=2), [], reserved="cpuset:0-1")
