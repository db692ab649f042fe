"""build_context: AvailableResources / ReservedResources values to a PolicyContext."""

from __future__ import annotations

import pytest

from cri_resmgr.policy.context import ConfigValueError, build_context
from cri_resmgr.topology.cpuset import CPUSet


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    from cri_resmgr.topology import discover
    from tests.harness.sysfs import generate

    root = tmp_path_factory.mktemp("ctxhost")
    # 2 sockets x 3 cores x 2 threads, linear: node 0 = 0-5, node 1 = 6-11.
    generate(root, sockets=2, cores_per_die=3, threads_per_core=2, numbering="linear")
    return discover(root)


@pytest.fixture(scope="module")
def topo_offline(tmp_path_factory):
    from cri_resmgr.topology import discover
    from tests.harness.sysfs import generate

    root = tmp_path_factory.mktemp("ctxhost")
    generate(root, sockets=1, cores_per_die=4, threads_per_core=2, offline=[6, 7])
    return discover(root)


def test_defaults_are_all_online_and_nothing_reserved(topo_offline):
    ctx = build_context(topo_offline)
    assert ctx.available == CPUSet("0-5")
    with pytest.raises(ConfigValueError, match="CPUs 6-7 are not online"):
        build_context(topo_offline, available="0-7")


def test_defaults_on_a_fully_online_machine(topo):
    ctx = build_context(topo)
    assert ctx.available == CPUSet("0-11")
    assert ctx.reserved == CPUSet()
    assert dict(ctx.options) == {}
    assert ctx.topology is topo


@pytest.mark.parametrize("available,expected", [
    ("0-3", "0-3"),
    ("cpuset:2-5", "2-5"),
    ({"CPU": "cpuset:0,4"}, "0,4"),
    ({"cpu": " 1-2 "}, "1-2"),
    ({}, "0-11"),
    ({"CPU": None}, "0-11"),
])
def test_available_syntax(topo, available, expected):
    assert build_context(topo, available=available).available == CPUSet(expected)


@pytest.mark.parametrize("reserved,expected", [
    (1, "0"),
    ("1", "0"),
    (2, "0-1"),  # the allocator takes a whole core
    ("500m", "0"),  # rounded up
    ("1500m", "0-1"),
    (1.5, "0-1"),
    ("cpuset:3", "3"),
    ("cpuset:2-3", "2-3"),
    ("cpuset:0,5", "0,5"),
    ({"CPU": "cpuset:4-5"}, "4-5"),
    (0, ""),
    (None, ""),
])
def test_reserved_syntax(topo, reserved, expected):
    assert build_context(topo, reserved=reserved).reserved == CPUSet(expected)


def test_reserved_count_comes_from_available_cpus(topo):
    ctx = build_context(topo, available="cpuset:5-8", reserved=2)
    assert ctx.reserved == CPUSet("6-7")  # the only whole free core


def test_options_are_passed_on_read_only(topo):
    ctx = build_context(topo, options={"StrictReservation": True})
    assert ctx.options["StrictReservation"] is True
    with pytest.raises(TypeError):
        ctx.options["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize("value", ["2-3", "0,5", " 1-2 "])
def test_reserved_cpu_list_without_the_prefix_is_refused(topo, value):
    """Issue 29.8: "2-3" silently meant CPUs 2 and 3 while "3" means three CPUs."""
    with pytest.raises(ConfigValueError, match=r"policy.ReservedResources.CPU: .* is not a CPU quantity; "
                                               r"a set of CPUs is written with the prefix, as in 'cpuset:"):
        build_context(topo, reserved=value)


@pytest.mark.parametrize("value", ["\u0661", "1" * 5000, "cpuset:0-4294967295", "cpuset:1-99999999"])
def test_reserved_hostile_values_are_refused_in_one_short_line(topo, value):
    """Issue 28.6: a non-ASCII digit, 5000 digits, four billion CPUs."""
    with pytest.raises(ConfigValueError) as e:
        build_context(topo, reserved=value)
    assert str(e.value).startswith("policy.ReservedResources.CPU: ") and len(str(e.value)) < 300


def test_available_four_billion_cpus_is_refused_at_once(topo):
    with pytest.raises(ConfigValueError, match=r"past the largest possible CPU id") as e:
        build_context(topo, available="cpuset:0-4294967295")
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("kwargs,message", [
    ({"available": "0-13"}, r"policy.AvailableResources.CPU: CPUs 12-13 are not online"),
    ({"available": "cpuset:"}, r"policy.AvailableResources.CPU: empty cpuset"),
    ({"available": "x-y"}, r"policy.AvailableResources.CPU: invalid CPU list"),
    ({"available": 4}, r"policy.AvailableResources.CPU: expected a cpuset"),
    ({"available": {"memory": "1G"}}, r"policy.AvailableResources.memory: unknown resource"),
    ({"available": "0-3", "reserved": "cpuset:5"},
     r"policy.ReservedResources.CPU: CPUs 5 are not among the available CPUs \(0-3\)"),
    ({"available": "0-3", "reserved": 5},
     r"policy.ReservedResources.CPU: 5 CPUs reserved but only 4 available"),
    ({"available": "0-3", "reserved": 4}, r"policy.ReservedResources.CPU: all available CPUs"),
    ({"available": "0-3", "reserved": "3500m"}, r"policy.ReservedResources.CPU: all available CPUs"),
    ({"available": "0-1", "reserved": "cpuset:0-1"}, r"policy.ReservedResources.CPU: all available CPUs"),
    ({"reserved": "lots"}, r"policy.ReservedResources.CPU: not a Kubernetes quantity: 'lots'"),
    ({"reserved": "-1"}, r"policy.ReservedResources.CPU: .*negative"),
    ({"reserved": "cpuset:0-x"}, r"policy.ReservedResources.CPU: invalid CPU list"),
    ({"reserved": True}, r"policy.ReservedResources.CPU: expected a CPU count or a cpuset"),
    ({"reserved": {"Cpu": [1]}}, r"policy.ReservedResources.Cpu: expected a CPU count"),
    ({"options": ["StrictReservation"]}, r"policy options: expected a mapping"),
])
def test_errors_name_the_key(topo, kwargs, message):
    with pytest.raises(ConfigValueError, match=message):
        build_context(topo, **kwargs)


def test_config_value_error_is_a_value_error():
    assert issubclass(ConfigValueError, ValueError)
