"""The policy's configuration section: names checked, values typed."""

from __future__ import annotations

import pytest
from ta_testkit import make, wl

from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.pools import check_options
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.topology_aware.options import OPTIONS, Options, parse_options
from tests.harness.sysfs import fake_topology


def test_defaults():
    assert parse_options({}) == Options()
    assert Options().pin_cpu and Options().pin_memory and Options().prefer_isolated


def test_all_options():
    o = parse_options({"PinCPU": False, "PinMemory": "false", "PreferIsolatedCPUs": False,
                       "PreferSharedCPUs": True, "ReservedPoolNamespaces": ["kube-*", "mon"],
                       "ColocatePods": True, "ColocateNamespaces": "true"})
    assert o == Options(False, False, False, True, ("kube-*", "mon"), True, True)
    assert o.reserved_namespace("kube-public") and o.reserved_namespace("mon") and not o.reserved_namespace("x")
    assert parse_options({"ReservedPoolNamespaces": "a, b"}).reserved_namespaces == ("a", "b")


@pytest.mark.parametrize(("options", "message"), [
    ({"PinCpu": True}, "policy.topology-aware.PinCpu: unknown option"),
    ({"PinMemory": "yes"}, "policy.topology-aware.PinMemory: expected true or false"),
    ({"ReservedPoolNamespaces": 3}, "policy.topology-aware.ReservedPoolNamespaces: expected a list"),
    ({"ReservedPoolNamespaces": ["ok", ""]}, "policy.topology-aware.ReservedPoolNamespaces: expected namespace"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ConfigValueError, match=message):
        parse_options(options)
    with pytest.raises(ConfigValueError, match=message):
        make(fake_topology(), **options)


def test_registered():
    info = default_registry().lookup("topology-aware")
    assert info.factory is not None and "pool tree" in info.description


def test_configuration_document_section_checked():
    from cri_resmgr.config import ConfigError, parse_document
    from cri_resmgr.engine.controller import build_policy

    registry = default_registry()
    topo = fake_topology(sockets=2, cores_per_die=2, numa_per_socket=2)
    info = registry.lookup("topology-aware")
    good = parse_document("policy:\n  Active: topology-aware\n  ReservedResources: {CPU: 1}\n"
                          "  topology-aware: {PinMemory: false, ColocatePods: true}\n", "doc", registry.names())
    policy = build_policy(info, good, lambda: topo)
    assert policy is not None and policy.allocate(wl("a", "Burstable", 100)).resources.cpuset_mems is None
    bad = parse_document("policy:\n  Active: topology-aware\n  topology-aware: {PinMemroy: false}\n", "doc",
                         registry.names())
    with pytest.raises(ConfigError, match="policy.topology-aware.PinMemroy: unknown option"):
        build_policy(info, bad, lambda: topo)


def test_an_unknown_option_names_the_likeliest_one_and_stays_one_short_line() -> None:
    # topology-aware has dozens of options: the full list made the line over 500 characters.
    with pytest.raises(ConfigValueError) as near:
        check_options({"PinCPUU": True}, OPTIONS, "topology-aware")
    assert str(near.value) == "policy.topology-aware.PinCPUU: unknown option (did you mean PinCPU?)"
    with pytest.raises(ConfigValueError) as far:
        check_options({"Zzzzzzzz": True}, OPTIONS, "topology-aware")
    assert "known: " in str(far.value) and len(str(far.value)) < 400
