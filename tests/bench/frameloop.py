"""The frame relay's own CPU per call, in process: no sockets, no event-loop wake-ups.

One `Connection` is fed the frames of unary calls as the relay reads them from
kubelet's grpcio client and containerd (captured from a real run and rebuilt
here): the request's HEADERS, WINDOW_UPDATE and DATA in one read; the runtime's
WINDOW_UPDATE, PING (its BDP probe), HEADERS, DATA (the reply, in frames of at
most 16 KiB) and trailers in the next; then the client's PING ack and
WINDOW_UPDATE. Writes go to a sink. `time.process_time` over `calls` calls
gives the CPU per call, which other sessions' load on a shared machine moves
far less than wall-clock latency. `--profile` prints cProfile's top entries.

    python -m tests.bench.frameloop [--calls 20000] [--profile] [--observed]

`--observed`: ListContainers and ContainerStatus replies are scanned for
exited containers, as with a policy active (`engine/exits.py`), and so are the
messages of a StreamContainers (kubelet 1.36, KEP-5825). `--method
StreamContainers` (not among the default five) streams the same containers as
ListContainers lists, `--stream-batch` a message (containerd sends up to 5000
a message, CRI-O one).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import time
from collections.abc import Sequence
from typing import Any

from hpack import Encoder

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport.contract import InterceptionTable
from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.connection import Connection
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.methods import MethodTable

__all__ = ["REPLY_SIZES", "Sink", "call_chunks", "connect", "measure", "main"]

RUNTIME = "/runtime.v1.RuntimeService/"
IMAGE = "/runtime.v1.ImageService/"
# The reply body sizes containerd 1.6 sent in the bench (ListContainers: 100 containers).
REPLY_SIZES = {"Version": 35, "ImageStatus": 106, "ListImages": 210, "ContainerStatus": 742,
               "ListContainers": 68_891}
PATHS = {"Version": RUNTIME, "ImageStatus": IMAGE, "ListImages": IMAGE, "ContainerStatus": RUNTIME,
         "ListContainers": RUNTIME, "StreamContainers": RUNTIME}
STREAM_BATCH = 5000  # containers a StreamContainers message holds, as containerd's
_USER_AGENT = b"grpc-python/1.85.3 grpc-c/58.0.0 (linux; chttp2)"


class Sink:
    """A transport that counts what is written to it."""

    def __init__(self) -> None:
        self.bytes = 0
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)
        self.writes += 1

    def writelines(self, data: Sequence[bytes]) -> None:
        for d in data:
            self.write(d)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


class _Side:
    def __init__(self) -> None:
        self.conn: Connection | None = None
        self.early = bytearray()
        self.lost = False


def _reply_body(method: str, stream_batch: int = STREAM_BATCH) -> bytes:
    """The reply's DATA: one gRPC message, or a StreamContainers' messages."""
    if method == "StreamContainers":
        listed = list(pb.ListContainersResponse.FromString(_reply_body("ListContainers")[5:]).containers)
        return b"".join(h2.grpc_message(pb.StreamContainersResponse(
            containers=listed[i:i + stream_batch]).SerializeToString()) for i in range(0, len(listed), stream_batch))
    if method == "ListContainers":
        c = pb.Container(id="a" * 64, pod_sandbox_id="b" * 64, state=pb.CONTAINER_CREATED,
                         metadata=pb.ContainerMetadata(name="c", attempt=0),
                         image=pb.ImageSpec(image="sha256:" + "c" * 64), image_ref="sha256:" + "d" * 64,
                         labels={"io.kubernetes.pod.name": "bench-list", "io.kubernetes.container.name": "c"},
                         annotations={"io.kubernetes.container.hash": "1234"}, created_at=1)
        per = len(pb.ListContainersResponse(containers=[c]).SerializeToString())
        n = max(1, REPLY_SIZES[method] // per)
        return h2.grpc_message(pb.ListContainersResponse(containers=[c] * n).SerializeToString())
    if method == "ContainerStatus":
        st = pb.ContainerStatus(id="a" * 64, state=pb.CONTAINER_CREATED, created_at=1,
                                metadata=pb.ContainerMetadata(name="c"), image=pb.ImageSpec(image="busybox"),
                                image_ref="sha256:" + "d" * 64, log_path="/var/log/pods/x/c/0.log",
                                labels={"io.kubernetes.pod.name": "bench-list"},
                                annotations={"io.kubernetes.container.hash": "1234" * 100})
        return h2.grpc_message(pb.ContainerStatusResponse(status=st).SerializeToString())
    size = min(127, REPLY_SIZES[method] - 2)
    return h2.grpc_message(b"\x0a" + bytes([size]) + b"x" * size)


def _frames(*frames: bytes) -> bytes:
    return b"".join(frames)


def call_chunks(method: str, client_enc: Encoder, runtime_enc: Encoder,
                stream_batch: int = STREAM_BATCH) -> tuple[bytes, bytes, bytes]:
    """The three reads of one call on stream 1: client, runtime, client."""
    block = client_enc.encode([(b":path", (PATHS[method] + method).encode()), (b":authority", b"relay.sock"),
                               (b":method", b"POST"), (b":scheme", b"http"),
                               (b"content-type", b"application/grpc"), (b"te", b"trailers"),
                               (b"grpc-accept-encoding", b"identity, deflate, gzip"),
                               (b"user-agent", _USER_AGENT)])
    request = h2.grpc_message(b"\x0a\x050.1.0")
    sid = 1
    c1 = _frames(h2.frame(h2.HEADERS, h2.END_HEADERS, sid, block), h2.window_update(sid, 5),
                 h2.frame(h2.DATA, h2.END_STREAM, sid, request), h2.window_update(0, 5))
    reply = _reply_body(method, stream_batch)
    data = [f for _, f in h2.data_frames(sid, reply, h2.DEFAULT_MAX_FRAME, False)]
    head = runtime_enc.encode([(b":status", b"200"), (b"content-type", b"application/grpc")])
    trailers = runtime_enc.encode([(b"grpc-status", b"0"), (b"grpc-message", b"")])
    r1 = _frames(h2.window_update(0, len(request)), h2.frame(h2.PING, 0, 0, bytes(8)),
                 h2.frame(h2.HEADERS, h2.END_HEADERS, sid, head), *data,
                 h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, sid, trailers))
    c2 = _frames(h2.frame(h2.PING, h2.ACK, 0, bytes(8)), h2.window_update(0, len(reply)))
    return c1, r1, c2


def _stream_offsets(chunk: bytes) -> list[int]:
    out, pos = [], 0
    while pos + 9 <= len(chunk):
        if int.from_bytes(chunk[pos + 5:pos + 9], "big") == 1:
            out.append(pos + 5)
        pos += 9 + int.from_bytes(chunk[pos:pos + 3], "big")
    return out


def _with_stream(chunk: bytes, offsets: list[int], sid: int) -> bytes:
    if not offsets:
        return chunk
    b = bytearray(chunk)
    raw = sid.to_bytes(4, "big")
    for o in offsets:
        b[o:o + 4] = raw
    return bytes(b)


def connect(interceptors: InterceptionTable | None) -> tuple[Connection, Sink, Sink, Encoder, Encoder]:
    relay = FrameRelay("/tmp/crirm-frameloop-unused.sock", "/tmp/crirm-frameloop-unused-rt.sock", MethodTable(),
                       interceptors=interceptors)
    client, runtime = Sink(), Sink()
    conn = Connection(relay, client, runtime, _Side())  # type: ignore[arg-type]
    settings = h2.settings_frame(b"\x00\x04\x00\x40\x00\x00\x00\x05\x00\x00\x40\x00")
    conn.from_client(h2.PREFACE + settings)
    conn.from_runtime(h2.settings_frame(b"\x00\x05\x00\x00\x40\x00"))
    conn.from_runtime(h2.frame(h2.SETTINGS, h2.ACK, 0))
    conn.from_client(h2.frame(h2.SETTINGS, h2.ACK, 0))
    # Both encoders were told SETTINGS_HEADER_TABLE_SIZE=0 by the relay.
    client_enc, runtime_enc = Encoder(), Encoder()
    client_enc.header_table_size = 0
    runtime_enc.header_table_size = 0
    return conn, client, runtime, client_enc, runtime_enc


async def _run(method: str, calls: int, interceptors: InterceptionTable | None,
               profile: cProfile.Profile | None, stream_batch: int = STREAM_BATCH) -> dict[str, Any]:
    conn, client, runtime, cenc, renc = connect(interceptors)
    # Each encoder's first block carries its table size update: the calls use the second's.
    for chunk, side in zip(call_chunks(method, cenc, renc, stream_batch),
                           (conn.from_client, conn.from_runtime, conn.from_client), strict=True):
        side(chunk)
    c1, r1, c2 = call_chunks(method, cenc, renc, stream_batch)
    offsets = [_stream_offsets(c) for c in (c1, r1, c2)]
    chunks = [tuple(_with_stream(c, o, 2 * i + 3) for c, o in zip((c1, r1, c2), offsets, strict=True))
              for i in range(calls)]
    if profile is not None:
        profile.enable()
    t0 = time.process_time()
    for a, b, c in chunks:
        conn.from_client(a)
        conn.from_runtime(b)
        while conn._ready:  # a scan's awaitable holds the status
            await asyncio.sleep(0)
        conn.from_client(c)
    cpu = time.process_time() - t0
    if profile is not None:
        profile.disable()
    if conn.closed or conn.open or conn.streams:
        raise RuntimeError(f"{method}: the connection did not relay every call (closed={conn.closed}, "
                           f"{len(conn.open)} open)")
    return {"cpu_us_per_call": round(cpu / calls * 1e6, 2), "writes_per_call": round(
        (client.writes + runtime.writes) / calls, 2)}


def measure(methods: Sequence[str] = tuple(REPLY_SIZES), calls: int = 20_000,
            interceptors: InterceptionTable | None = None,
            profile: cProfile.Profile | None = None, stream_batch: int = STREAM_BATCH) -> dict[str, dict[str, Any]]:
    """CPU per call of each method through one connection's frame loop."""
    return {m: asyncio.run(_run(m, calls, interceptors, profile, stream_batch)) for m in methods}


def _observers() -> InterceptionTable:
    from cri_resmgr.engine import exits  # only with --observed

    return exits.interceptors(lambda ids: None, lambda ids: [])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries")
    parser.add_argument("--observed", action="store_true", help="scan replies for exited containers")
    parser.add_argument("--method", action="append", help="default: all five (StreamContainers is a sixth)")
    parser.add_argument("--stream-batch", type=int, default=STREAM_BATCH,
                        help="containers a StreamContainers message holds")
    args = parser.parse_args(argv)
    profile = cProfile.Profile() if args.profile else None
    interceptors = _observers() if args.observed else None
    result = measure(args.method or tuple(REPLY_SIZES), args.calls, interceptors, profile, args.stream_batch)
    for method, r in result.items():
        print(f"{method:16} {r['cpu_us_per_call']:7.2f} us/call  {r['writes_per_call']:.2f} writes/call")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
