"""Kubernetes quantity parsing, as the policy engine and the kubelet driver use it."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cri_resmgr.policy.quantity import parse_bytes, parse_cpu_milli, parse_quantity


@pytest.mark.parametrize(
    "text, milli",
    [("500m", 500), ("1", 1000), ("2.5", 2500), (".5", 500), ("1e3", 1_000_000), ("0.1m", 1),
     ("1500u", 2), ("0", 0), (2, 2000), (0.25, 250), ("+1", 1000), ("1k", 1_000_000)],
)
def test_cpu_in_millicores_rounds_up(text, milli) -> None:
    assert parse_cpu_milli(text) == milli


@pytest.mark.parametrize(
    "text, value",
    [("64Mi", 64 << 20), ("1G", 10**9), ("1.5Ki", 1536), ("1Gi", 1 << 30), ("1E", 10**18), ("1Ei", 1 << 60),
     ("1E3", 1000), ("1e-3", 1), ("100m", 1), ("123", 123), ("2Ti", 2 << 40), (1024, 1024)],
)
def test_bytes(text, value) -> None:
    assert parse_bytes(text) == value


def test_exact_value() -> None:
    assert parse_quantity("1.5Mi") == Fraction(3 << 19)
    assert parse_quantity("-2m") == Fraction(-1, 500)


@pytest.mark.parametrize("bad", ["", "abc", "1x", "1 Gi", "Mi", "1e", "1.2.3", "1KI", "0x10", "1e1000", None, True, [1]])
def test_malformed_quantities_name_the_text(bad) -> None:
    with pytest.raises(ValueError) as err:
        parse_cpu_milli(bad)
    assert repr(bad) in str(err.value)


def test_negative_resources_are_rejected() -> None:
    with pytest.raises(ValueError, match="'-1'"):
        parse_cpu_milli("-1")
    with pytest.raises(ValueError, match="'-64Mi'"):
        parse_bytes("-64Mi")
