"""Building a policy from a configuration: a wrong value is a rejected
configuration, a TypeError from the policy's constructor is a bug and is not
disguised as one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cri_resmgr.config import ConfigError, EngineSettings, parse_document
from cri_resmgr.engine.controller import Controller
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.registry import PolicyInfo, Registry
from tests.harness.sysfs import generate


class _NoTransport:
    """The policy is never built, so nothing may reach the transport."""

    def reconfigure(self, **changes) -> None:
        raise AssertionError(f"reconfigured with {changes}")


def _controller(tmp_path: Path, factory) -> Controller:
    generate(tmp_path / "host", sockets=1, cores_per_die=2, threads_per_core=1)
    settings = EngineSettings(state_dir=str(tmp_path / "state"), host_root=str(tmp_path / "host"))
    registry = Registry([PolicyInfo("picky", "a policy whose constructor raises", factory)])
    return Controller(settings, registry, _NoTransport(), None, lambda *args: None)


def _config():
    return parse_document("policy: {Active: picky}\n", "test config", ["picky"])


def test_a_type_error_from_a_policy_constructor_propagates_as_a_bug(tmp_path):
    def buggy(context):
        raise TypeError("unsupported operand type(s) for +: 'CPUSet' and 'int'")

    controller = _controller(tmp_path, buggy)
    with pytest.raises(TypeError, match="unsupported operand"):
        asyncio.run(controller.apply(_config()))
    assert controller.config is None  # nothing switched in
    # The agent's push is not answered as a rejection either (the Config
    # service reports it as an internal error) and is not remembered.
    with pytest.raises(TypeError):
        asyncio.run(controller.apply_agent({"policy": "Active: picky\n"}))
    assert not (tmp_path / "state").exists()


def test_a_value_error_from_a_policy_constructor_is_a_rejected_configuration(tmp_path):
    def picky(context):
        raise ConfigValueError("policy.picky.Level: expected 1 to 3, got 7")

    controller = _controller(tmp_path, picky)
    with pytest.raises(ConfigError, match="test config: policy.picky.Level: expected 1 to 3"):
        asyncio.run(controller.apply(_config()))
    assert asyncio.run(controller.apply_agent({"policy": "Active: picky\n"})).startswith("agent: policy.picky.Level")
    assert controller.config is None


class _Feed:
    def reconfigure(self, **changes) -> None:
        pass


def test_every_policy_section_given_is_checked_on_this_node(tmp_path):
    """Issue 29.4: the section of a policy not in force used to be accepted unchecked
    (exit 0), its error surfacing when that policy was switched to, maybe at a restart."""
    from cri_resmgr.policy.registry import default_registry

    generate(tmp_path / "host", sockets=1, cores_per_die=2, threads_per_core=1)
    settings = EngineSettings(state_dir=str(tmp_path / "state"), host_root=str(tmp_path / "host"))
    registry = default_registry()
    controller = Controller(settings, registry, _Feed(), None, lambda *args: None)
    for section, message in (
            ("balloons: {BalloonTypes: [{Name: x, MinCPUs: 99}]}",
             "agent: policy.balloons.BalloonTypes[0].MinCPUs: 99 CPUs per balloon cannot be given: this node "
             "has 2 CPUs online, 2 of them available to balloons"),
            ("topology-aware: {PinCPUU: true}", "agent: policy.topology-aware.PinCPUU: unknown option"),
            ("balloons: {BalloonTypes: [{Name: x, MinBalloons: 1000000}]}",
             "agent: policy.balloons.BalloonTypes[0].MinBalloons: 1000000 balloons cannot be made")):
        error = asyncio.run(controller.apply_agent({"policy": f"Active: none\n{section}\n"}))
        assert error is not None and error.startswith(message), error
    assert controller.config is None
    assert asyncio.run(controller.apply_agent({"policy": "Active: none\nballoons: {BalloonTypes: [{Name: x}]}\n"})) \
        is None
