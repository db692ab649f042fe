"""The CRI schema: generated modules are fresh, complete and wire compatible.

Wire compatibility is what matters: kubelet and containerd encode CRI messages
with their own copies of the schema, and cri-resmgr decodes and re-encodes the
calls it intercepts with ours. A field number or type that differs from
upstream silently corrupts that field.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zlib
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor, FileDescriptor

from cri_resmgr._proto import (
    runtime_v1_pb2,
    runtime_v1_pb2_grpc,
    runtime_v1alpha2_pb2,
    runtime_v1alpha2_pb2_grpc,
)

REPO = Path(__file__).resolve().parent.parent
GEN_SCRIPT = REPO / "scripts" / "gen-protos.sh"
PROTO_PKG_DIR = REPO / "cri_resmgr" / "_proto"
V1ALPHA2_PROTO = REPO / "protos" / "runtime_v1alpha2.proto"

VERSIONS = {
    "runtime.v1": (runtime_v1_pb2, runtime_v1_pb2_grpc),
    "runtime.v1alpha2": (runtime_v1alpha2_pb2, runtime_v1alpha2_pb2_grpc),
}

RUNTIME_UNARY = {
    "Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox",
    "PodSandboxStatus", "ListPodSandbox", "CreateContainer", "StartContainer",
    "StopContainer", "RemoveContainer", "ListContainers", "ContainerStatus",
    "UpdateContainerResources", "ReopenContainerLog", "ExecSync", "Exec",
    "Attach", "PortForward", "ContainerStats", "ListContainerStats",
    "PodSandboxStats", "ListPodSandboxStats", "UpdateRuntimeConfig", "Status",
    "CheckpointContainer", "ListMetricDescriptors", "ListPodSandboxMetrics",
    "RuntimeConfig", "UpdatePodSandboxResources",
}
# GetContainerEvents plus the list-streaming variants (KEP 5825).
RUNTIME_SERVER_STREAMING = {
    "GetContainerEvents", "StreamPodSandboxes", "StreamContainers",
    "StreamContainerStats", "StreamPodSandboxStats", "StreamPodSandboxMetrics",
}
IMAGE_UNARY = {"ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo"}
IMAGE_SERVER_STREAMING = {"StreamImages"}


def run_gen_protos(out_dir: Path, proto_out_dir: Path, python: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=python)
    return subprocess.run(
        ["bash", str(GEN_SCRIPT), str(out_dir), str(proto_out_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )


def generated_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*_pb2*.py*"))}


# --------------------------------------------------------------- staleness


def test_committed_generated_files_match_a_fresh_generation(tmp_path: Path) -> None:
    out, proto_out = tmp_path / "out", tmp_path / "protos"
    result = run_gen_protos(out, proto_out, sys.executable)
    assert result.returncode == 0, f"gen-protos.sh failed:\n{result.stderr}"

    fresh, committed = generated_files(out), generated_files(PROTO_PKG_DIR)
    hint = (
        "run `make protos` (scripts/gen-protos.sh) and commit the result; "
        "note the output also embeds the grpcio-tools version"
    )
    assert sorted(committed) == sorted(fresh), (
        f"cri_resmgr/_proto holds {sorted(committed)} but protos/ generates "
        f"{sorted(fresh)}: {hint}"
    )
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated modules {stale}: {hint}"
    assert (proto_out / V1ALPHA2_PROTO.name).read_bytes() == V1ALPHA2_PROTO.read_bytes(), (
        f"protos/{V1ALPHA2_PROTO.name} differs from what runtime_v1.proto derives: {hint}"
    )


def test_generation_into_temp_dirs_leaves_the_tree_untouched(tmp_path: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in [V1ALPHA2_PROTO, *PROTO_PKG_DIR.glob("*.py")]}
    result = run_gen_protos(tmp_path / "out", tmp_path / "protos", sys.executable)
    assert result.returncode == 0, result.stderr
    after = {p: p.stat().st_mtime_ns for p in [V1ALPHA2_PROTO, *PROTO_PKG_DIR.glob("*.py")]}
    assert before == after


def test_generated_imports_are_package_qualified() -> None:
    for path in PROTO_PKG_DIR.glob("*_pb2*.py*"):
        text = path.read_text()
        bare = re.findall(r"^import \w+_pb2\b.*$", text, flags=re.M)
        assert not bare, f"{path.name} has unqualified imports {bare}"
    grpc_module = (PROTO_PKG_DIR / "runtime_v1_pb2_grpc.py").read_text()
    assert "from cri_resmgr._proto import runtime_v1_pb2" in grpc_module


def test_gen_protos_names_an_interpreter_without_grpc_tools(tmp_path: Path) -> None:
    result = run_gen_protos(tmp_path / "out", tmp_path / "protos", "/bin/false")
    assert result.returncode != 0
    assert "/bin/false" in result.stderr and "grpc_tools" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_v1alpha2_differs_from_v1_only_in_package() -> None:
    v1 = runtime_v1_pb2.DESCRIPTOR
    v1alpha2 = runtime_v1alpha2_pb2.DESCRIPTOR
    assert v1.package == "runtime.v1" and v1alpha2.package == "runtime.v1alpha2"

    def shape(fd: FileDescriptor) -> bytes:
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        text = str(proto).replace(fd.package, "PKG").replace(fd.name, "FILE")
        return text.encode()

    assert shape(v1) == shape(v1alpha2)


# --------------------------------------------------------------- services


@pytest.mark.parametrize("package", sorted(VERSIONS))
@pytest.mark.parametrize(
    "service, unary, streaming",
    [
        ("RuntimeService", RUNTIME_UNARY, RUNTIME_SERVER_STREAMING),
        ("ImageService", IMAGE_UNARY, IMAGE_SERVER_STREAMING),
    ],
)
def test_service_exposes_every_rpc_with_its_streaming_kind(
    package: str, service: str, unary: set[str], streaming: set[str]
) -> None:
    pb2, _ = VERSIONS[package]
    methods = {m.name: m for m in pb2.DESCRIPTOR.services_by_name[service].methods}
    assert set(methods) == unary | streaming
    for name, method in methods.items():
        assert not method.client_streaming, name
        assert method.server_streaming == (name in streaming), name
        assert method.input_type.file is pb2.DESCRIPTOR, name


@pytest.mark.parametrize("package", sorted(VERSIONS))
def test_grpc_stub_round_trips_unary_and_streaming_calls(package: str, tmp_path: Path) -> None:
    pb2, pb2_grpc = VERSIONS[package]

    class Runtime(pb2_grpc.RuntimeServiceServicer):
        def Version(self, request, context):
            return pb2.VersionResponse(version=request.version, runtime_name="fake")

        def GetContainerEvents(self, request, context):
            for cid in ("a", "b"):
                yield pb2.ContainerEventResponse(
                    container_id=cid,
                    container_event_type=pb2.CONTAINER_STARTED_EVENT,
                )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb2_grpc.add_RuntimeServiceServicer_to_server(Runtime(), server)
    address = f"unix://{tmp_path}/cri.sock"
    server.add_insecure_port(address)
    server.start()
    try:
        with grpc.insecure_channel(address) as channel:
            stub = pb2_grpc.RuntimeServiceStub(channel)
            reply = stub.Version(pb2.VersionRequest(version="0.1.0"))
            assert (reply.version, reply.runtime_name) == ("0.1.0", "fake")
            events = list(stub.GetContainerEvents(pb2.GetEventsRequest()))
            assert [e.container_id for e in events] == ["a", "b"]
            with pytest.raises(grpc.RpcError) as err:
                stub.Status(pb2.StatusRequest())
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
            # The full method path is what a relay routes on.
            path = f"/{package}.RuntimeService/Version"
            raw = channel.unary_unary(path)(pb2.VersionRequest(version="x").SerializeToString())
            assert pb2.VersionResponse.FromString(raw).runtime_name == "fake"
    finally:
        server.stop(grace=None)


# --------------------------------------------------------------- wire compatibility

I64, STR, MSG, MAP = "int64", "string", "message", "map"
# (message, field) -> (number, kind), checked against k8s.io/cri-api
# pkg/apis/runtime/v1/api.proto.
WIRE_FACTS = {
    ("CreateContainerRequest", "pod_sandbox_id"): (1, STR),
    ("CreateContainerRequest", "config"): (2, MSG),
    ("CreateContainerRequest", "sandbox_config"): (3, MSG),
    ("LinuxContainerResources", "cpu_period"): (1, I64),
    ("LinuxContainerResources", "cpu_quota"): (2, I64),
    ("LinuxContainerResources", "cpu_shares"): (3, I64),
    ("LinuxContainerResources", "memory_limit_in_bytes"): (4, I64),
    ("LinuxContainerResources", "oom_score_adj"): (5, I64),
    ("LinuxContainerResources", "cpuset_cpus"): (6, STR),
    ("LinuxContainerResources", "cpuset_mems"): (7, STR),
    ("LinuxContainerResources", "hugepage_limits"): (8, MSG),
    ("LinuxContainerResources", "unified"): (9, MAP),
    ("LinuxContainerResources", "memory_swap_limit_in_bytes"): (10, I64),
    ("ContainerConfig", "metadata"): (1, MSG),
    ("ContainerConfig", "envs"): (6, MSG),
    ("ContainerConfig", "labels"): (9, MAP),
    ("ContainerConfig", "annotations"): (10, MAP),
    ("ContainerConfig", "linux"): (15, MSG),
    ("ContainerConfig", "CDI_devices"): (17, MSG),
    ("ContainerConfig", "stop_signal"): (18, "enum"),
    ("LinuxContainerConfig", "resources"): (1, MSG),
    ("LinuxPodSandboxConfig", "cgroup_parent"): (1, STR),
    ("LinuxPodSandboxConfig", "overhead"): (4, MSG),
    ("LinuxPodSandboxConfig", "resources"): (5, MSG),
    ("PodSandboxConfig", "annotations"): (7, MAP),
    ("PodSandboxConfig", "linux"): (8, MSG),
    ("UpdateContainerResourcesRequest", "container_id"): (1, STR),
    ("UpdateContainerResourcesRequest", "linux"): (2, MSG),
    ("UpdateContainerResourcesRequest", "annotations"): (4, MAP),
    ("UpdatePodSandboxResourcesRequest", "resources"): (3, MSG),
    ("ContainerStatus", "resources"): (16, MSG),
    ("ContainerStatus", "stop_signal"): (19, "enum"),
    ("ImageSpec", "user_specified_image"): (18, STR),
    ("ImageSpec", "image_ref"): (20, STR),
    ("LinuxSandboxSecurityContext", "run_as_group"): (8, MSG),
    ("LinuxSandboxSecurityContext", "supplemental_groups_policy"): (11, "enum"),
    ("LinuxContainerSecurityContext", "run_as_group"): (12, MSG),
    ("LinuxContainerSecurityContext", "supplemental_groups_policy"): (17, "enum"),
    ("AttachRequest", "stdin"): (2, "bool"),
    ("AttachRequest", "tty"): (3, "bool"),
    ("ExecRequest", "tty"): (3, "bool"),
    ("ExecRequest", "stdin"): (4, "bool"),
    ("Namespace", "options"): (2, MSG),
    ("ContainerEventResponse", "pod_sandbox_status"): (4, MSG),
}


def field_kind(field: FieldDescriptor) -> str:
    if field.message_type is not None:
        return MAP if field.message_type.GetOptions().map_entry else MSG
    if field.enum_type is not None:
        return "enum"
    return {
        FieldDescriptor.TYPE_INT64: I64,
        FieldDescriptor.TYPE_STRING: STR,
        FieldDescriptor.TYPE_BOOL: "bool",
    }.get(field.type, f"type{field.type}")


@pytest.mark.parametrize("package", sorted(VERSIONS))
def test_spot_checked_field_numbers_match_upstream(package: str) -> None:
    pb2, _ = VERSIONS[package]
    wrong = {}
    for (message, name), expected in WIRE_FACTS.items():
        field = pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[name]
        actual = (field.number, field_kind(field))
        if actual != expected:
            wrong[f"{message}.{name}"] = (actual, expected)
    assert not wrong, f"(actual, expected): {wrong}"


def test_enum_values_match_upstream() -> None:
    pb2 = runtime_v1_pb2
    assert pb2.ContainerState.Value("CONTAINER_EXITED") == 2
    assert pb2.NamespaceMode.Value("TARGET") == 3
    assert pb2.Signal.Value("SIGKILL") == 13
    assert pb2.Signal.Value("SIGRTMAX") == 65
    assert pb2.SecurityProfile.ProfileType.Value("Localhost") == 2
    assert pb2.CgroupDriver.Value("CGROUPFS") == 1


def test_linux_resources_encode_to_the_upstream_bytes() -> None:
    # Hand-encoded per the protobuf wire format: tag = number << 3 | wire type.
    msg = runtime_v1_pb2.LinuxContainerResources(
        cpu_shares=2, cpuset_cpus="0-1", memory_swap_limit_in_bytes=1
    )
    assert msg.SerializeToString() == b"\x18\x02" + b"\x32\x030-1" + b"\x50\x01"
    request = runtime_v1_pb2.UpdateContainerResourcesRequest(container_id="c", linux=msg)
    assert request.SerializeToString() == b"\x0a\x01c" + b"\x12\x09" + msg.SerializeToString()


def test_v1_bytes_decode_as_v1alpha2() -> None:
    v1 = runtime_v1_pb2.CreateContainerRequest(pod_sandbox_id="p")
    v1.config.metadata.name = "c"
    v1.config.envs.add(key="K", value="V")
    v1.config.linux.resources.cpuset_cpus = "1"
    v1alpha2 = runtime_v1alpha2_pb2.CreateContainerRequest.FromString(v1.SerializeToString())
    assert v1alpha2.config.envs[0].value == "V"
    assert v1alpha2.config.linux.resources.cpuset_cpus == "1"
    assert v1alpha2.SerializeToString() == v1.SerializeToString()


# --------------------------------------------------------------- against the installed containerd

# Fields upstream renumbered or retyped after containerd's copy was cut; ours
# follows current upstream. GetContainerEvents carried PodSandboxMetadata in
# field 4 until cri-api 0.27 replaced it with PodSandboxStatus.
KNOWN_UPSTREAM_CHANGES = {("runtime.v1", "ContainerEventResponse", 4)}


def embedded_cri_descriptors(binary: Path) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Go protobuf registers each schema as a gzipped FileDescriptorProto in the binary."""
    data = binary.read_bytes()
    found = {}
    for match in re.finditer(rb"\x1f\x8b\x08\x00\x00\x00\x00\x00", data):
        try:
            raw = zlib.decompressobj(31).decompress(data[match.start():match.start() + (1 << 20)])
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except Exception:  # most gzip magic hits are not descriptors
            continue
        if fd.package in VERSIONS and fd.service:
            found[fd.package] = fd
    return found


def all_messages(messages, prefix: str = ""):
    for message in messages:
        yield prefix + message.name, message
        yield from all_messages(message.nested_type, prefix + message.name + ".")


def all_enums(fd: descriptor_pb2.FileDescriptorProto):
    yield from ((e.name, e) for e in fd.enum_type)
    for name, message in all_messages(fd.message_type):
        yield from ((f"{name}.{e.name}", e) for e in message.enum_type)


def schema_mismatches(
    theirs: descriptor_pb2.FileDescriptorProto, ours: descriptor_pb2.FileDescriptorProto
) -> list[str]:
    problems = []
    our_messages = dict(all_messages(ours.message_type))
    for name, message in all_messages(theirs.message_type):
        if name not in our_messages:
            problems.append(f"message {name} missing")
            continue
        by_number = {f.number: f for f in our_messages[name].field}
        for field in message.field:
            if (theirs.package, name, field.number) in KNOWN_UPSTREAM_CHANGES:
                continue
            mine = by_number.get(field.number)
            key = lambda f: (f.name, f.type, f.label, f.type_name)  # noqa: E731
            if mine is None or key(mine) != key(field):
                problems.append(f"{name}.{field.name}={field.number}")
    our_enums = dict(all_enums(ours))
    for name, enum in all_enums(theirs):
        values = {v.name: v.number for v in our_enums[name].value} if name in our_enums else {}
        problems += [f"{name}.{v.name}" for v in enum.value if values.get(v.name) != v.number]
    our_methods = {(s.name, m.name): m for s in ours.service for m in s.method}
    for service in theirs.service:
        for method in service.method:
            mine = our_methods.get((service.name, method.name))
            key = lambda m: (m.input_type, m.output_type, m.server_streaming, m.client_streaming)  # noqa: E731
            if mine is None or key(mine) != key(method):
                problems.append(f"rpc {service.name}.{method.name}")
    return problems


@pytest.mark.skipif(shutil.which("containerd") is None, reason="containerd not installed")
@pytest.mark.parametrize("package", sorted(VERSIONS))
def test_schema_is_a_superset_of_the_installed_containerds(package: str) -> None:
    theirs = embedded_cri_descriptors(Path(shutil.which("containerd"))).get(package)
    if theirs is None:
        pytest.skip(f"installed containerd embeds no {package} schema")
    ours = descriptor_pb2.FileDescriptorProto()
    VERSIONS[package][0].DESCRIPTOR.CopyToProto(ours)
    assert schema_mismatches(theirs, ours) == []


def test_schema_comparison_reports_a_renumbered_field() -> None:
    theirs = descriptor_pb2.FileDescriptorProto()
    runtime_v1_pb2.DESCRIPTOR.CopyToProto(theirs)
    ours = descriptor_pb2.FileDescriptorProto()
    ours.CopyFrom(theirs)
    for message in ours.message_type:
        if message.name == "LinuxContainerResources":
            next(f for f in message.field if f.name == "cpuset_cpus").number = 11
    assert schema_mismatches(theirs, ours) == ["LinuxContainerResources.cpuset_cpus=6"]
