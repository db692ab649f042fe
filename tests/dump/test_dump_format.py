"""Dump formatting with real CRI messages: human and JSON lines, qualifiers,
secret redaction, failures, counts.  Drives the writer synchronously (no thread)."""

import io
import json
import re

import pytest
import yaml

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr._proto import runtime_v1alpha2_pb2 as pb_alpha
from cri_resmgr.dump.format import FORMATS, CountRecord, DropRecord, HumanFormat, JsonlFormat, NoteRecord
from cri_resmgr.dump.redact import MAX_INFO_CHARS, REDACTED, looks_secret, redact_envs
from cri_resmgr.dump.rules import Level
from cri_resmgr.dump.writer import CNT, NOTE, REP, REQ, Writer
from cri_resmgr.dump.yaml_text import to_yaml
from cri_resmgr.transport.methods import MethodTable

RT = "/runtime.v1.RuntimeService/"
POD_ID = "a1b2c3d4e5f6a7b8c9d0" * 3
CTR_ID = "0f9e8d7c6b5a4f3e2d1c" * 3
T0 = 1_700_000_000.25
HEADER = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (=>|<=|##|!!) ")


@pytest.fixture(scope="module")
def methods():
    return MethodTable()


def make_writer(methods, fmt="human", redact=True, clock=lambda: T0):
    out = io.StringIO()
    return Writer(out, FORMATS[fmt](redact=redact), methods, clock=clock), out


def create_container_request():
    return pb.CreateContainerRequest(
        pod_sandbox_id=POD_ID,
        config=pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="app", attempt=1),
            image=pb.ImageSpec(image="docker.io/library/nginx:1.25"),
            command=["nginx", "-g", "daemon off;"],
            envs=[pb.KeyValue(key="HOME", value="/root"),
                  pb.KeyValue(key="DB_Password", value="hunter2"),
                  pb.KeyValue(key="github_token", value="ghp_abc"),
                  pb.KeyValue(key="AWS_SECRET_ACCESS_KEY", value="wJalr"),
                  pb.KeyValue(key="PORT", value="8080")],
            linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(
                cpu_shares=1024, memory_limit_in_bytes=1 << 30, cpuset_cpus="0-1")),
        ),
        sandbox_config=pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="nginx", namespace="default")),
    )


def dump_create(writer, level=Level.FULL):
    path = RT + "CreateContainer"
    writer.handle((REQ, path, 7, create_container_request().SerializeToString(), T0, level))
    reply = pb.CreateContainerResponse(container_id=CTR_ID).SerializeToString()
    writer.handle((REP, path, 7, reply, T0 + 0.0125, level, 0.0125, None, ""))


def body_of(text: str) -> dict:
    """The YAML body lines (indented) under the first header of text."""
    lines = text.splitlines()
    assert HEADER.match(lines[0]), lines[0]
    body = []
    for line in lines[1:]:
        if HEADER.match(line):
            break
        assert line.startswith("    "), line
        body.append(line[4:])
    return yaml.safe_load("\n".join(body))


# -- human ---------------------------------------------------------------------------


def test_human_full_request_and_reply(methods):
    writer, out = make_writer(methods)
    dump_create(writer)
    text = out.getvalue()
    request_text, reply_text = text.split("\n", 1)[0], text[text.index(" <= ") - 23:]
    assert request_text.endswith(" => #7 CreateContainer [nginx:app]")
    assert reply_text.splitlines()[0].endswith(" <= #7 CreateContainer [nginx:app] 12.500ms")
    body = body_of(text)
    assert body["pod_sandbox_id"] == POD_ID
    assert body["config"]["linux"]["resources"] == {
        "cpu_shares": 1024, "memory_limit_in_bytes": 1 << 30, "cpuset_cpus": "0-1"}
    assert body["config"]["command"] == ["nginx", "-g", "daemon off;"]
    assert body["config"]["image"]["image"] == "docker.io/library/nginx:1.25"
    assert body_of(reply_text) == {"container_id": CTR_ID}


def test_human_masks_secret_envs(methods):
    writer, out = make_writer(methods)
    dump_create(writer)
    envs = {e["key"]: e["value"] for e in body_of(out.getvalue())["config"]["envs"]}
    assert envs == {"HOME": "/root", "DB_Password": REDACTED, "github_token": REDACTED,
                    "AWS_SECRET_ACCESS_KEY": REDACTED, "PORT": "8080"}
    for secret in ("hunter2", "ghp_abc", "wJalr"):
        assert secret not in out.getvalue()


def test_human_unredacted_shows_secrets(methods):
    writer, out = make_writer(methods, redact=False)
    dump_create(writer)
    envs = {e["key"]: e["value"] for e in body_of(out.getvalue())["config"]["envs"]}
    assert envs["DB_Password"] == "hunter2" and envs["github_token"] == "ghp_abc"
    assert REDACTED not in out.getvalue()


def test_human_name_level_has_headers_only(methods):
    writer, out = make_writer(methods)
    dump_create(writer, Level.NAME)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("=> #7 CreateContainer [nginx:app]")
    assert lines[1].endswith("<= #7 CreateContainer [nginx:app] 12.500ms")


def test_human_failed_call_shows_code_and_message(methods):
    writer, out = make_writer(methods)
    path = RT + "StartContainer"
    writer.handle((REQ, path, 9, pb.StartContainerRequest(container_id=CTR_ID).SerializeToString(), T0, Level.FULL))
    writer.handle((REP, path, 9, None, T0 + 2, Level.FULL, 2.5, "NOT_FOUND", f'container "{CTR_ID}" not found'))
    last = out.getvalue().splitlines()[-1]
    assert last.endswith(f'<= #9 StartContainer [{CTR_ID[:13]}] 2.500s ERROR NOT_FOUND: container "{CTR_ID}" not found')


def test_human_v1alpha2_and_unknown_methods(methods):
    writer, out = make_writer(methods)
    req = pb_alpha.VersionRequest(version="0.1.0").SerializeToString()
    writer.handle((REQ, "/runtime.v1alpha2.RuntimeService/Version", 1, req, T0, Level.FULL))
    writer.handle((REQ, "/acme.Gadget/Frob", 2, b"\x01\x02\x03", T0, Level.FULL))
    writer.handle((REQ, RT + "StartContainer", 3, b"\xff\xff", T0, Level.FULL))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("=> #1 v1alpha2/Version")
    assert lines[1] == "    version: 0.1.0"
    assert lines[2].endswith("=> #2 /acme.Gadget/Frob")
    assert lines[3] == "    <3 bytes, method unknown to the CRI table>"
    assert lines[4].endswith("=> #3 StartContainer")
    assert lines[5].startswith("    <2 bytes, undecodable: DecodeError")


def test_human_notes_counts_and_drops():
    fmt = HumanFormat()
    assert fmt(NoteRecord(T0, "would set cpuset 0-1\nfor nginx:app")).splitlines()[1].endswith(" ## for nginx:app")
    text = fmt(CountRecord(T0, 30.0, {RT + "ListContainers": (12, 0), RT + "StartContainer": (3, 1)}))
    lines = text.splitlines()
    assert lines[0].endswith(" ## calls in the last 30.0s:")
    assert lines[1:] == ["    ListContainers: 12", "    StartContainer: 3 (1 failed)"]
    assert "5 messages dropped (7 in total)" in fmt(DropRecord(T0, 5, 7))


# -- qualifiers ------------------------------------------------------------------------


def test_qualifiers_learned_from_replies(methods):
    writer, out = make_writer(methods)
    run = pb.RunPodSandboxRequest(config=pb.PodSandboxConfig(
        metadata=pb.PodSandboxMetadata(name="web", namespace="shop")))
    writer.handle((REQ, RT + "RunPodSandbox", 1, run.SerializeToString(), T0, Level.NAME))
    writer.handle((REP, RT + "RunPodSandbox", 1, pb.RunPodSandboxResponse(pod_sandbox_id=POD_ID).SerializeToString(),
                   T0, Level.NAME, 0.1, None, ""))
    writer.handle((REQ, RT + "StopPodSandbox", 2, pb.StopPodSandboxRequest(pod_sandbox_id=POD_ID).SerializeToString(),
                   T0, Level.NAME))
    # A container only ever seen in a ListContainers reply, in a pod known by id.
    listed = pb.ListContainersResponse(containers=[
        pb.Container(id="c" * 64, pod_sandbox_id=POD_ID, metadata=pb.ContainerMetadata(name="side")),
        pb.Container(id="d" * 64, pod_sandbox_id="e" * 64, metadata=pb.ContainerMetadata(name="lone"),
                     labels={"io.kubernetes.pod.name": "other"}),
    ])
    writer.handle((REQ, RT + "ListContainers", 3, b"", T0, Level.NAME))
    writer.handle((REP, RT + "ListContainers", 3, listed.SerializeToString(), T0, Level.NAME, 0.1, None, ""))
    for call_id, cid in ((4, "c" * 64), (5, "d" * 64), (6, "f" * 64)):
        req = pb.ContainerStatusRequest(container_id=cid).SerializeToString()
        writer.handle((REQ, RT + "ContainerStatus", call_id, req, T0, Level.NAME))
    pull = pb.PullImageRequest(image=pb.ImageSpec(image="busybox:1.36")).SerializeToString()
    writer.handle((REQ, "/runtime.v1.ImageService/PullImage", 7, pull, T0, Level.NAME))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("=> #1 RunPodSandbox [shop/web]")
    assert lines[1].endswith("<= #1 RunPodSandbox [shop/web] 100.000ms")
    assert lines[2].endswith("=> #2 StopPodSandbox [shop/web]")
    assert lines[5].endswith("=> #4 ContainerStatus [web:side]")
    assert lines[6].endswith("=> #5 ContainerStatus [other:lone]")
    assert lines[7].endswith(f"=> #6 ContainerStatus [{'f' * 13}]")
    assert lines[8].endswith("=> #7 PullImage [busybox:1.36]")


def test_create_container_reply_teaches_container_name(methods):
    writer, out = make_writer(methods)
    dump_create(writer, Level.NAME)
    writer.handle((REQ, RT + "StartContainer", 8, pb.StartContainerRequest(container_id=CTR_ID).SerializeToString(),
                   T0, Level.NAME))
    writer.handle((REQ, RT + "PodSandboxStatus", 9,
                   pb.PodSandboxStatusRequest(pod_sandbox_id=POD_ID).SerializeToString(), T0, Level.NAME))
    lines = out.getvalue().splitlines()
    assert lines[2].endswith("=> #8 StartContainer [nginx:app]")
    assert lines[3].endswith("=> #9 PodSandboxStatus [default/nginx]")


def test_removed_container_is_forgotten(methods):
    writer, out = make_writer(methods)
    dump_create(writer, Level.NAME)
    rm = pb.RemoveContainerRequest(container_id=CTR_ID).SerializeToString()
    writer.handle((REQ, RT + "RemoveContainer", 8, rm, T0, Level.NAME))
    writer.handle((REP, RT + "RemoveContainer", 8, b"", T0, Level.NAME, 0.01, None, ""))
    writer.handle((REQ, RT + "RemoveContainer", 9, rm, T0, Level.NAME))
    lines = out.getvalue().splitlines()
    assert lines[3].endswith("<= #8 RemoveContainer [nginx:app] 10.000ms")
    assert lines[4].endswith(f"=> #9 RemoveContainer [{CTR_ID[:13]}]")


def test_streamed_replies_keep_qualifier_until_the_end(methods):
    writer, out = make_writer(methods)
    path = RT + "GetContainerEvents"
    writer.handle((REQ, path, 3, b"", T0, Level.NAME))
    for i in range(2):
        event = pb.ContainerEventResponse(container_id=CTR_ID).SerializeToString()
        writer.handle((REP, path, 3, event, T0, Level.NAME, 0.5 * i, None, ""))
    writer.handle((REP, path, 3, None, T0, Level.NAME, 1.0, "CANCELLED", "client went away"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[3].endswith("<= #3 GetContainerEvents 1.000s ERROR CANCELLED: client went away")
    assert writer._pending == {}


# -- JSON lines ------------------------------------------------------------------------


def jsonl(out):
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_jsonl_request_and_reply(methods):
    writer, out = make_writer(methods, "jsonl")
    dump_create(writer)
    req, rep = jsonl(out)
    assert set(req) == {"time", "direction", "service", "method", "call_id", "qualifier", "latency",
                        "code", "details", "body"}
    assert req["time"].startswith("2023-11-14T22:13:20.250000")
    assert (req["direction"], req["service"], req["method"]) == ("request", "runtime.v1.RuntimeService",
                                                                 "CreateContainer")
    assert (req["qualifier"], req["latency"], req["code"], req["call_id"]) == ("nginx:app", None, None, 7)
    # MessageToDict, proto field names, proto3 JSON mapping (64-bit ints as strings).
    assert req["body"]["config"]["linux"]["resources"]["memory_limit_in_bytes"] == str(1 << 30)
    assert req["body"]["sandbox_config"]["metadata"] == {"name": "nginx", "namespace": "default"}
    assert (rep["direction"], rep["latency"], rep["code"]) == ("reply", 0.0125, "OK")
    assert rep["body"] == {"container_id": CTR_ID}


def test_jsonl_redaction_and_unredacted(methods):
    for redact, expected in ((True, REDACTED), (False, "hunter2")):
        writer, out = make_writer(methods, "jsonl", redact=redact)
        dump_create(writer)
        envs = {e["key"]: e["value"] for e in jsonl(out)[0]["body"]["config"]["envs"]}
        assert envs["DB_Password"] == expected
        assert envs["HOME"] == "/root"


def test_jsonl_name_level_failure_and_unknown(methods):
    writer, out = make_writer(methods, "jsonl")
    dump_create(writer, Level.NAME)
    writer.handle((REP, RT + "StopContainer", 4, None, T0, Level.FULL, 0.2, "DEADLINE_EXCEEDED", "too slow"))
    writer.handle((REQ, "/acme.Gadget/Frob", 5, b"\x01\x02", T0, Level.FULL))
    objs = jsonl(out)
    assert objs[0]["body"] is None and objs[1]["body"] is None
    assert (objs[2]["code"], objs[2]["details"], objs[2]["body"]) == ("DEADLINE_EXCEEDED", "too slow", None)
    assert (objs[3]["service"], objs[3]["method"], objs[3]["body"]) == ("acme.Gadget", "Frob", {"raw_bytes": 2})


def test_jsonl_notes_counts_drops():
    fmt = JsonlFormat()
    assert json.loads(fmt(NoteRecord(T0, "would set x")))["text"] == "would set x"
    lines = fmt(CountRecord(T0, 30.0, {RT + "ListContainers": (12, 0), RT + "StartContainer": (3, 1)})).splitlines()
    objs = [json.loads(line) for line in lines]
    assert [(o["method"], o["count"], o["failed"]) for o in objs] == [("ListContainers", 12, 0),
                                                                     ("StartContainer", 3, 1)]
    assert json.loads(fmt(DropRecord(T0, 5, 7))) == {"time": "2023-11-14T22:13:20.250000+00:00",
                                                     "direction": "dropped", "dropped": 5, "total": 7}


# -- counts through the writer -------------------------------------------------------


def test_counts_are_written_per_period_only_when_non_zero(methods):
    now = [T0]
    writer, out = make_writer(methods, clock=lambda: now[0])
    writer.write_counts()
    assert out.getvalue() == ""
    for _ in range(3):
        writer.handle((CNT, RT + "ListContainers", 1, 0))
    writer.handle((CNT, RT + "Version", 1, 0))
    writer.handle((CNT, RT + "Version", 0, 1))
    now[0] += 30
    writer.write_counts()
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("## calls in the last 30.0s:")
    assert lines[1:] == ["    ListContainers: 3", "    Version: 1 (1 failed)"]
    now[0] += 30
    writer.write_counts()  # the counts were reset: nothing new
    assert len(out.getvalue().splitlines()) == 3


def test_note_item(methods):
    writer, out = make_writer(methods)
    writer.handle((NOTE, "would set cpuset 2-3 for nginx:app", T0))
    assert out.getvalue().rstrip().endswith(" ## would set cpuset 2-3 for nginx:app")


# -- redaction and YAML helpers -------------------------------------------------------


def test_redact_envs_anywhere():
    body = {"status": {"envs": [{"key": "MY_API_KEY", "value": "k"}, {"key": "LANG", "value": "C"}]},
            "list": [{"envs": [{"key": "password"}, {"key": "Auth_Header", "value": "Bearer x"}]}]}
    redact_envs(body)
    assert body["status"]["envs"] == [{"key": "MY_API_KEY", "value": REDACTED}, {"key": "LANG", "value": "C"}]
    assert body["list"][0]["envs"] == [{"key": "password"}, {"key": "Auth_Header", "value": REDACTED}]


def test_annotations_and_command_lines_masked_by_name():
    body = {"config": {"annotations": {"example.com/api-token": "t", "io.kubernetes.container.hash": "h"},
                       "command": ["app", "--db-password=p1", "--Session-Key", "p2", "--auth", "--verbose"],
                       "args": ["env", "API_TOKEN=p3", "PLAIN=v", "--plain", "v2", "-c", "echo TOKEN=x"]},
            "cmd": ["sh", "-token", "p4"]}
    redact_envs(body)
    assert body["config"]["annotations"] == {"example.com/api-token": REDACTED, "io.kubernetes.container.hash": "h"}
    assert body["config"]["command"] == ["app", f"--db-password={REDACTED}", "--Session-Key", REDACTED,
                                         "--auth", "--verbose"]  # a flag after a flag is no value
    # Free text (a shell script) is not looked into: documented.
    assert body["config"]["args"] == ["env", f"API_TOKEN={REDACTED}", "PLAIN=v", "--plain", "v2", "-c", "echo TOKEN=x"]
    assert body["cmd"] == ["sh", "-token", REDACTED]


def _verbose(info: dict) -> dict:
    return {"status": {"id": "c1"}, "info": {"info": json.dumps(info)}}


def test_verbose_info_json_masked_by_the_same_rules_and_still_json():
    info = {"sandboxID": "s1", "pid": 7, "removing": False, "runtimeOptions": None,
            "config": {"envs": [{"key": "API_TOKEN", "value": "t1"}, {"key": "HOME", "value": "/root"}],
                       "annotations": {"x/secret": "t2"}, "args": ["--key", "t3"]},
            "runtimeSpec": {"process": {"env": ["PATH=/bin", "API_TOKEN=t4", "NOEQUALS"],
                                        "args": ["app", "--token=t5"]},
                            "annotations": {"io.kubernetes.cri.sandbox-id": "s1", "x/auth": "t6"},
                            "hooks": {"prestart": [{"path": "/h", "env": ["MY_PASSWORD=t7"]}]}}}
    body = redact_envs(_verbose(info))
    text = body["info"]["info"]
    for secret in ("t1", "t2", "t3", "t4", "t5", "t6", "t7"):
        assert f'"{secret}"' not in text and f"={secret}" not in text
    out = json.loads(text)
    assert out["config"]["envs"] == [{"key": "API_TOKEN", "value": REDACTED}, {"key": "HOME", "value": "/root"}]
    assert out["runtimeSpec"]["process"]["env"] == ["PATH=/bin", f"API_TOKEN={REDACTED}", "NOEQUALS"]
    assert out["runtimeSpec"]["process"]["args"] == ["app", f"--token={REDACTED}"]
    assert out["runtimeSpec"]["annotations"] == {"io.kubernetes.cri.sandbox-id": "s1", "x/auth": REDACTED}
    assert out["runtimeSpec"]["hooks"]["prestart"][0]["env"] == [f"MY_PASSWORD={REDACTED}"]
    # Same shape: every key and value that is no secret is as it was.
    assert {k: out[k] for k in ("sandboxID", "pid", "removing", "runtimeOptions")} == \
        {"sandboxID": "s1", "pid": 7, "removing": False, "runtimeOptions": None}


def test_verbose_info_without_secrets_is_left_byte_for_byte():
    text = '{ "pid": 7,\n  "runtimeSpec": {"process": {"env": ["PATH=/bin"]}} }'
    body = {"info": {"info": text, "empty": ""}}
    redact_envs(body)
    assert body["info"] == {"info": text, "empty": ""}


@pytest.mark.parametrize("text, why", [
    ("API_TOKEN=t1 not json", "not JSON"),
    ("[" * 100 + "\"API_TOKEN=t1\"" + "]" * 100, "nested deeper"),
    ('{"env": ["API_TOKEN=t1"], "pad": "' + "x" * MAX_INFO_CHARS + '"}', "more than the"),
])
def test_verbose_info_that_cannot_be_read_is_withheld(text, why):
    body = {"info": {"info": text}}
    redact_envs(body)
    assert body["info"]["info"].startswith(REDACTED) and why in body["info"]["info"]
    assert "t1" not in body["info"]["info"]


def test_verbose_info_in_both_formats_and_unredacted(methods):
    info = {"runtimeSpec": {"process": {"env": ["API_TOKEN=hunter2"]}}}
    reply = pb.ContainerStatusResponse(status=pb.ContainerStatus(id="c1"),
                                       info={"info": json.dumps(info)}).SerializeToString()
    for fmt in ("human", "jsonl"):
        for redact in (True, False):
            writer, out = make_writer(methods, fmt, redact=redact)
            writer.handle((REP, RT + "ContainerStatus", 1, reply, T0, Level.FULL, 0.001, "OK", ""))
            assert ("hunter2" in out.getvalue()) is not redact, (fmt, redact)


@pytest.mark.parametrize("name", ["PASSWORD", "db_passwd", "GH_TOKEN", "client-secret", "SSH_PRIVATE", "KEY",
                                  "credentials_file", "BASIC_AUTH"])
def test_secret_names(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["HOME", "PATH", "PORT", "LANG", "HOSTNAME"])
def test_plain_names(name):
    assert not looks_secret(name)


def test_yaml_text_round_trips_awkward_values():
    tricky = ["", "true", "No", "null", "~", "123", "0x1f", "1e3", "1_000", "1:20", ".inf", "2024-01-01",
              "a: b", "- x", "x #y", "multi\nline", "tab\there", "ends:", "=", "<<", "é ü", "\x85", "\x7f",
              "'quoted'", '"dq"', "{x}", "[y]", "*ref", "&anchor", "!tag", "%pct", "@at", "`tick`", "?q",
              "docker.io/library/nginx:1.25", "0-1", "3f2a9c1e", "/dev/null"]
    data = {
        "strings": tricky,
        "ints": [0, -1, 1 << 62], "floats": [0.5, -1e-9, 1e300, 2.0, float("inf")], "bools": [True, False],
        "none": None, "empty_map": {}, "empty_list": [],
        "nested": [{"a": 1, "b": [1, 2]}, [3, [4]], {"k": {"x": "y"}}],
        "map": {"io.kubernetes.pod.name": "x", "true": "key that looks like a bool", "": "empty key"},
    }
    assert yaml.safe_load(to_yaml(data)) == data
    assert yaml.safe_load(to_yaml(data, indent=4)) == data
    assert "docker.io/library/nginx:1.25\n" in to_yaml({"i": "docker.io/library/nginx:1.25"})
