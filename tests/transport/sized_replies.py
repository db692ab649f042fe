"""CRI list replies of an exact size, made of thousands of realistic items: containers,
sandboxes and their stats with kubelet's labels and annotations (about 2.5 KiB each), as a
node with thousands of containers answers kubelet. For the runtime double's `replies`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from cri_resmgr._proto import runtime_v1_pb2 as pb

MiB = 1 << 20
PAD = "kubectl.kubernetes.io/last-applied-configuration"


def _labels(i: int) -> dict[str, str]:
    return {"io.kubernetes.pod.name": f"app-{i:05d}-7d9c8b6f5-x2k4q", "io.kubernetes.pod.namespace": "team-a",
            "io.kubernetes.pod.uid": f"{i:08x}-1111-2222-3333-444455556666",
            "io.kubernetes.container.name": f"app-{i:05d}", "app.kubernetes.io/name": "app",
            "app.kubernetes.io/part-of": "shop", "pod-template-hash": "7d9c8b6f5"}


def _annotations(i: int) -> dict[str, str]:
    return {"io.kubernetes.container.hash": f"{i:08x}", "io.kubernetes.container.restartCount": "0",
            "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
            "io.kubernetes.container.terminationMessagePolicy": "File",
            "io.kubernetes.pod.terminationGracePeriod": "30",
            PAD: '{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{},"labels":{"app":"app"}},'
                 + '"spec":{"containers":[{"image":"registry.example.com/team-a/app:1.2.3","name":"app"}]}}' * 8}


def _container(i: int) -> pb.Container:
    return pb.Container(
        id=f"{i:064x}", pod_sandbox_id=f"{i + 1 << 32:064x}",
        metadata=pb.ContainerMetadata(name=f"app-{i:05d}"),
        image=pb.ImageSpec(image="registry.example.com/team-a/app:1.2.3"), image_ref=f"sha256:{i:064x}",
        state=pb.CONTAINER_RUNNING, created_at=1_700_000_000_000_000_000 + i,
        labels=_labels(i), annotations=_annotations(i))


def _sandbox(i: int) -> pb.PodSandbox:
    return pb.PodSandbox(id=f"{i:064x}", metadata=pb.PodSandboxMetadata(
        name=f"app-{i:05d}-7d9c8b6f5-x2k4q", uid=f"{i:08x}-1111-2222-3333-444455556666", namespace="team-a"),
        state=pb.SANDBOX_READY, created_at=1_700_000_000_000_000_000 + i, labels=_labels(i),
        annotations=_annotations(i), runtime_handler="runc")


def _container_stats(i: int) -> pb.ContainerStats:
    return pb.ContainerStats(
        attributes=pb.ContainerAttributes(id=f"{i:064x}", metadata=pb.ContainerMetadata(name=f"app-{i:05d}"),
                                          labels=_labels(i), annotations=_annotations(i)),
        cpu=pb.CpuUsage(timestamp=1, usage_core_nano_seconds=pb.UInt64Value(value=i * 1000)),
        memory=pb.MemoryUsage(timestamp=1, working_set_bytes=pb.UInt64Value(value=i * 4096)))


def _sandbox_stats(i: int) -> pb.PodSandboxStats:
    return pb.PodSandboxStats(
        attributes=pb.PodSandboxAttributes(id=f"{i:064x}", metadata=pb.PodSandboxMetadata(
            name=f"app-{i:05d}", uid=f"{i:08x}", namespace="team-a"), labels=_labels(i),
            annotations=_annotations(i)),
        linux=pb.LinuxPodSandboxStats(cpu=pb.CpuUsage(timestamp=1, usage_core_nano_seconds=pb.UInt64Value(value=i))))


# Method -> (reply type, its repeated field, one item, the map of an item to pad).
KINDS: dict[str, tuple[type[Message], str, Callable[[int], Any], Callable[[Any], Any]]] = {
    "ListContainers": (pb.ListContainersResponse, "containers", _container, lambda c: c.annotations),
    "ListPodSandbox": (pb.ListPodSandboxResponse, "items", _sandbox, lambda s: s.annotations),
    "ListContainerStats": (pb.ListContainerStatsResponse, "stats", _container_stats,
                           lambda s: s.attributes.annotations),
    "ListPodSandboxStats": (pb.ListPodSandboxStatsResponse, "stats", _sandbox_stats,
                            lambda s: s.attributes.annotations),
}


def sized_reply(method: str, size: int, exited: int | None = None) -> bytes:
    """A serialized reply of `method` of exactly `size` bytes; for ListContainers, the
    container numbered `exited` (if any) has exited."""
    reply_type, field, item, padded = KINDS[method]
    one = reply_type()
    getattr(one, field).append(item(99_999))  # no item is larger: its numbers have the most digits
    n = max(1, size // one.ByteSize() - 1)
    reply = reply_type()
    items = getattr(reply, field)
    items.extend(item(i) for i in range(n))
    if exited is not None:
        items[exited].state = pb.CONTAINER_EXITED
    last = padded(items[-1])
    pad = last[PAD]
    for _ in range(8):  # the lengths' varints change with the pad: a few rounds settle it
        missing = size - reply.ByteSize()
        if missing == 0:
            return reply.SerializeToString()
        pad = pad[:max(0, len(pad) + missing)] if missing < 0 else pad + "p" * missing
        last[PAD] = pad
    raise AssertionError(f"no {method} reply of exactly {size} bytes")
