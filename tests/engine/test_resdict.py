"""engine/resdict.py gives exactly what json_format does (issue 37), for the messages and
dicts a container's resources are, and the odd ones the state file may hold."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf import json_format

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine import resdict


def _json(m: pb.LinuxContainerResources) -> dict[str, Any]:
    return json_format.MessageToDict(m, preserving_proto_field_name=True)


def _parse(d: dict[str, Any]) -> pb.LinuxContainerResources:
    return json_format.ParseDict(d, pb.LinuxContainerResources(), ignore_unknown_fields=True)


def _messages() -> list[pb.LinuxContainerResources]:
    rng = random.Random(37)
    out = [pb.LinuxContainerResources(),
           pb.LinuxContainerResources(cpu_shares=2, cpuset_cpus="0-3", cpuset_mems="0"),
           pb.LinuxContainerResources(cpu_period=100000, cpu_quota=-1, oom_score_adj=-997,
                                      memory_limit_in_bytes=(1 << 63) - 1, memory_swap_limit_in_bytes=1 << 30),
           pb.LinuxContainerResources(cpu_shares=1024, hugepage_limits=[pb.HugepageLimit(page_size="2MB", limit=4)]),
           pb.LinuxContainerResources(cpuset_cpus="1", unified={"memory.high": "max", "cpu.weight": "100"})]
    for _ in range(200):
        m = pb.LinuxContainerResources()
        for name in ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes", "oom_score_adj",
                     "memory_swap_limit_in_bytes"):
            if rng.random() < 0.5:
                setattr(m, name, rng.choice([0, 1, -1, 2, 1024, 100000, -(1 << 63), (1 << 63) - 1]))
        for name in ("cpuset_cpus", "cpuset_mems"):
            if rng.random() < 0.5:
                setattr(m, name, rng.choice(["", "0", "0-3,8", "0,1"]))
        out.append(m)
    return out


@pytest.mark.parametrize("m", _messages(), ids=lambda m: str(m).replace("\n", " ")[:60] or "empty")
def test_to_dict_and_back_are_json_formats(m: pb.LinuxContainerResources) -> None:
    d = resdict.to_dict(m)
    assert d == _json(m) and list(d) == list(_json(m))  # the same keys in the same order
    assert resdict.from_dict(d) == _parse(d) == m


@pytest.mark.parametrize("d", [
    {"cpu_shares": 2, "cpuset_cpus": "0"},  # numbers where json_format writes strings: it reads both
    {"cpu_shares": "-0"},
    {"cpuShares": "2"},  # the JSON name
    {"cpu_shares": "2", "no_such_field": 1},
    {"cpu_shares": None},
    {"cpu_shares": 2.0},
    {"cpu_shares": "\u0661\u0662"},  # digits int() reads
])
def test_odd_dicts_parse_as_json_format_parses_them(d: dict[str, Any]) -> None:
    assert resdict.from_dict(d) == _parse(d)


@pytest.mark.parametrize("d", [{"cpu_shares": "--5"}, {"cpu_shares": True}, {"cpu_shares": "1 2"},
                               {"cpu_shares": str(1 << 64)}, {"cpuset_cpus": 5}])
def test_bad_values_fail_as_json_format_fails_on_them(d: dict[str, Any]) -> None:
    with pytest.raises(json_format.ParseError) as theirs:
        _parse(d)
    with pytest.raises(json_format.ParseError) as ours:
        resdict.from_dict(d)
    assert str(ours.value) == str(theirs.value)
