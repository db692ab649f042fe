"""Reading a jsonl dump: requests paired with replies, and errors naming file and line."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.simulate.calls import WorkloadError
from cri_resmgr.simulate.dumpread import parse_dump, read_dump

T = "2026-01-01T00:00:0{}.000000+00:00"


def line(direction, method, call_id, body=None, code=None, second=0, service="runtime.v1.RuntimeService", **kw):
    obj = {"time": T.format(second), "direction": direction, "service": service, "method": method,
           "call_id": call_id, "qualifier": None, "latency": None, "code": code, "details": None, "body": body}
    obj.update(kw)
    return json.dumps(obj)


def body(msg) -> dict:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def session() -> list[str]:
    create = pb.CreateContainerRequest(pod_sandbox_id="p1", config=pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name="c")))
    return [
        json.dumps({"time": T.format(0), "direction": "note", "text": "hello"}),
        line("request", "Version", 1, {}, second=0),
        line("reply", "Version", 1, body(pb.VersionResponse(version="0.1.0")), "OK"),
        line("request", "RunPodSandbox", 2, body(pb.RunPodSandboxRequest()), second=1),
        line("reply", "RunPodSandbox", 2, body(pb.RunPodSandboxResponse(pod_sandbox_id="p1")), "OK"),
        line("request", "CreateContainer", 3, body(create), second=2, service="runtime.v1alpha2.RuntimeService"),
        line("request", "StartContainer", 4, body(pb.StartContainerRequest(container_id="x")), second=3),
        line("reply", "StartContainer", 4, None, "NOT_FOUND", details="no such container"),
        line("reply", "CreateContainer", 3, body(pb.CreateContainerResponse(container_id="c1")), "OK",
             service="runtime.v1alpha2.RuntimeService"),
        line("request", "ListImages", 5, None, service="runtime.v1.ImageService"),
        line("request", "StopContainer", 6, body(pb.StopContainerRequest(container_id="c1")), second=4),
    ]


def test_calls_in_request_order_with_replies_failures_and_relative_times():
    rec = parse_dump(session(), "s.jsonl")
    assert [c.method for c in rec.calls] == ["Version", "RunPodSandbox", "CreateContainer", "StartContainer",
                                             "StopContainer"]
    create = rec.calls[2]
    # v1alpha2 is read with v1 classes, as the relay's interceptors read it
    assert isinstance(create.request, pb.CreateContainerRequest) and create.reply.container_id == "c1"
    assert create.service == "runtime.v1alpha2.RuntimeService" and create.where == "s.jsonl:6"
    assert create.time == 2.0
    start = rec.calls[3]
    assert start.failed and start.code == "NOT_FOUND" and start.reply is None
    assert rec.calls[4].code == "UNKNOWN" and rec.unanswered == 1  # the dump ends before its reply
    assert rec.skipped == {"ListImages": 1}


@pytest.mark.parametrize("bad, says", [
    ('{"time": "2026-01-01T00:00:00+00:00", "direction": "requ', "s.jsonl:4: not a JSON object"),
    (line("request", "Frobnicate", 9, {}), "s.jsonl:4: unknown CRI method runtime.v1.RuntimeService/Frobnicate"),
    (line("request", "CreateContainer", 9, None), "s.jsonl:4: CreateContainer request recorded without its body"),
    (line("request", "CreateContainer", 9, {"raw_bytes": 12, "decode_error": "DecodeError: x"}),
     "s.jsonl:4: CreateContainer: the relay could not decode this message (DecodeError: x)"),
    (line("request", "CreateContainer", 9, {"config": {"metadata": {"attempt": "many"}}}),
     "s.jsonl:4: CreateContainer: body does not fit CreateContainerRequest"),
    (line("sideways", "Version", 9, {}), "s.jsonl:4: direction 'sideways'"),
    ("[1, 2]", "s.jsonl:4: expected a JSON object"),
    (line("request", "Version", "nine", {}), "s.jsonl:4: call_id: expected an integer"),
])
def test_bad_lines_name_the_file_and_line(bad, says):
    lines = session()[:3] + [bad] + session()[3:]
    with pytest.raises(WorkloadError) as e:
        parse_dump(lines, "s.jsonl")
    assert says in str(e.value)


def test_reply_without_the_id_it_gives(tmp_path):
    lines = [line("request", "RunPodSandbox", 1, {}), line("reply", "RunPodSandbox", 1, None, "OK")]
    with pytest.raises(WorkloadError, match="s.jsonl:2: RunPodSandbox reply recorded without its body"):
        parse_dump(lines, "s.jsonl")


def test_files(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read dump"):
        read_dump(str(tmp_path / "none.jsonl"))
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WorkloadError, match="b.jsonl:1: not UTF-8 text"):
        read_dump(str(binary))
