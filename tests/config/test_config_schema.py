"""Configuration documents and modules: strict validation, errors naming the key."""

import pytest

from cri_resmgr.config import ConfigError, parse_document, parse_modules

NAMES = ["none", "null", "static", "static-plus"]


def test_seed_example():
    c = parse_document("policy: {Active: static, ReservedResources: {CPU: 1}}", "f", NAMES)
    assert c.policy.active == "static" and c.policy.reserved_cpu == 1
    assert c.policy.reserved_namespaces == ("kube-system",)


def test_full_document_round_trips_through_to_document():
    text = """
policy:
  Active: static-plus
  ReservedResources: {CPU: "cpuset:0-1"}
  AvailableResources: {CPU: "0-15"}
  ReservedPoolNamespaces: [kube-system, "monitoring-*"]
  FailClosed: true
  static: {StrictReservation: true}
dump: {Config: "name:.*", Format: jsonl, File: /tmp/d}
logger: {Debug: true}
"""
    c = parse_document(text, "f", NAMES)
    again = parse_document(__import__("yaml").safe_dump(c.to_document()), "g", NAMES)
    assert again.policy == c.policy and again.dump == c.dump and again.logger == c.logger


@pytest.mark.parametrize("text,message", [
    ("polcy: {}", "polcy: unknown key"),
    ("policy: {Active: fancy}", "policy.Active: unknown policy 'fancy'"),
    ("policy: {Bogus: 1}", "policy.Bogus: unknown key"),
    ("policy: {ReservedResources: {Memory: 1}}", "policy.ReservedResources.Memory: unknown key"),
    ("policy: {ReservedResources: {CPU: true}}", "policy.ReservedResources.CPU"),
    ("policy: {FailClosed: maybe}", "policy.FailClosed: expected true or false"),
    ("policy: {ReservedPoolNamespaces: kube-system}", "ReservedPoolNamespaces"),
    ("policy: 3", "policy: expected a mapping"),
    ("dump: {Config: 'loud:.*'}", "dump.Config"),
    ("dump: {Format: xml}", "dump.Format"),
    ("logger: {Debug: 1}", "logger.Debug"),
    ("- a\n- b", "expected a mapping of modules"),
    ("policy: {Active: [", "invalid YAML"),
])
def test_errors_name_the_problem(text, message):
    with pytest.raises(ConfigError) as e:
        parse_document(text, "src", NAMES)
    assert message in str(e.value)
    assert str(e.value).startswith("src: ")


def test_modules_as_in_a_configmap():
    c = parse_modules({"policy": "Active: static\nReservedResources:\n  CPU: 2\n", "logger": "Debug: true"},
                      "cm", NAMES)
    assert c.policy.reserved_cpu == 2 and c.logger.debug
    with pytest.raises(ConfigError, match="module policy: invalid YAML"):
        parse_modules({"policy": "Active: [x"}, "cm", NAMES)
    with pytest.raises(ConfigError, match="cpufreq: unknown key"):
        parse_modules({"cpufreq": "x: 1"}, "cm", NAMES)
    with pytest.raises(ConfigError, match=r"^cm: rdt\.x: unknown key"):  # a module now (docs/classes.md)
        parse_modules({"rdt": "x: 1"}, "cm", NAMES)


def test_empty_is_defaults():
    c = parse_document("", "f", NAMES)
    assert c.policy.active is None and c.dump.specs == () and not c.logger.debug
