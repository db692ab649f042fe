"""The cheap update of another container's resources (resmgr._sync) gives what
the json_format round trip it replaced gave: the same message, the same saved dict."""

import pytest
from google.protobuf import json_format

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine.core import write_cpuset
from cri_resmgr.engine.resmgr import _copy, _with_cpuset
from cri_resmgr.policy.api import Resources
from cri_resmgr.topology.cpuset import CPUSet

SAVED = [
    {},
    {"cpu_shares": "102"},
    {"cpu_period": "100000", "cpu_quota": "200000", "cpu_shares": "2048", "memory_limit_in_bytes": "268435456",
     "oom_score_adj": -997, "cpuset_cpus": "0-63", "cpuset_mems": "0",
     "hugepage_limits": [{"page_size": "2MB", "limit": "0"}], "unified": {"memory.high": "max"}},
    {"cpuset_cpus": "4", "cpuset_mems": "1"},
]
TARGETS = [Resources(CPUSet("2-31,34-63")), Resources(CPUSet("5"), cpuset_mems="0-1"), Resources(CPUSet("1"), "")]


def _canonical(d: dict) -> dict:
    """The saved dicts are json_format's own output (create, adoption, kubelet's
    update merged key by key, the state file written from those)."""
    return json_format.MessageToDict(json_format.ParseDict(d, pb.LinuxContainerResources()),
                                     preserving_proto_field_name=True)


def _old_way(saved: dict, target: Resources) -> tuple[pb.LinuxContainerResources, dict]:
    linux = json_format.ParseDict(saved, pb.LinuxContainerResources(), ignore_unknown_fields=True)
    write_cpuset(linux, target)
    return linux, json_format.MessageToDict(linux, preserving_proto_field_name=True)


@pytest.mark.parametrize("saved", SAVED)
@pytest.mark.parametrize("target", TARGETS)
def test_a_kept_message_changed_gives_what_parsing_the_saved_dict_gave(saved, target):
    saved = _canonical(saved)
    want_linux, want_saved = _old_way(saved, target)
    kept = json_format.ParseDict(saved, pb.LinuxContainerResources())
    linux = _copy(kept)
    write_cpuset(linux, target)
    assert linux == want_linux
    fast = _with_cpuset(saved, linux)
    if fast is None:  # a cpuset key comes or goes: the engine re-encodes
        assert ("cpuset_cpus" in saved, "cpuset_mems" in saved) != ("cpuset_cpus" in want_saved,
                                                                    "cpuset_mems" in want_saved)
    else:  # the same dict, down to the key order (the state file's bytes)
        assert list(fast.items()) == list(want_saved.items())
    assert kept == json_format.ParseDict(saved, pb.LinuxContainerResources())  # the kept one is not changed
    assert linux.cpuset_cpus == str(target.cpuset_cpus)


def test_a_copy_drops_fields_the_saved_dict_could_not_hold():
    # A newer kubelet's field, unknown to these protos: the parse of the saved dict
    # never had it, so the copy sent to the runtime must not either.
    known = pb.LinuxContainerResources(cpu_shares=2).SerializeToString()
    unknown_field = bytes([0x98, 0x06, 1])  # field 99 (tag 99 << 3 as a varint), value 1
    linux = pb.LinuxContainerResources.FromString(known + unknown_field)
    assert linux.SerializeToString() != known
    assert _copy(linux).SerializeToString() == known
