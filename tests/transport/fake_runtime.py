"""An in-process gRPC server standing in for a runtime, for faults containerd cannot show.

Tests of the relay against the real containerd live in test_relay_containerd.py;
this one only answers what a real runtime cannot be made to do on demand:
trailing metadata, chosen status codes, slow calls, echoing metadata and deadlines,
replies of a chosen size (`replies`: thousands of containers without creating them),
and the calls of kubelets newer than the containerd releases here: the six Stream* lists
(KEP-5825), streamed as `streamed` says, or UNIMPLEMENTED as containerd 1.6-2.1 answer
them (`streaming = False`), and RuntimeConfig.
"""

from __future__ import annotations

import asyncio

import grpc

from cri_resmgr._proto import runtime_v1_pb2 as pb

V1 = "/runtime.v1.RuntimeService/"
# KEP-5825's streamed lists, by path.
STREAMS = {V1 + m: m for m in ("StreamContainers", "StreamPodSandboxes", "StreamContainerStats",
                               "StreamPodSandboxStats", "StreamPodSandboxMetrics")}
STREAMS["/runtime.v1.ImageService/StreamImages"] = "StreamImages"


# Fixed 64 KiB flow-control windows (no BDP growth): a relay that loses track
# of window credit stalls within a few calls instead of after many megabytes.
SMALL_WINDOWS = (("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65535))


class FakeRuntime:
    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.server: grpc.aio.Server | None = None
        self.cancelled = asyncio.Event()
        self.seen_metadata: dict[str, str] = {}
        self.seen_remaining: float | None = None
        self.requests: dict[str, bytes] = {}
        # Method name -> the serialized reply it answers with (instead of the echo).
        self.replies: dict[str, bytes] = {}
        self.unimplemented: set[str] = set()  # paths answered UNIMPLEMENTED, as by a runtime without them
        # The Stream* lists, by method name: the messages each call streams (serialized
        # StreamContainersResponse...), then OK; `stream_fails` after that many messages, the
        # runtime aborts the stream with UNAVAILABLE instead; with `stream_gate` set, it waits on
        # it before each message after the first (a test cancels meanwhile); `streaming = False`:
        # UNIMPLEMENTED, as containerd before streaming.
        self.streaming = True
        self.streamed: dict[str, list[bytes]] = {m: [] for m in STREAMS.values()}
        self.stream_fails: int | None = None
        self.stream_gate: asyncio.Event | None = None
        self.stream_cancelled = asyncio.Event()
        # RuntimeConfig's reply (kubelet reads its cgroup driver from it); None: UNIMPLEMENTED.
        self.runtime_config: pb.RuntimeConfigResponse | None = pb.RuntimeConfigResponse(
            linux=pb.LinuxRuntimeConfiguration(cgroup_driver=pb.CgroupDriver.CGROUPFS))

    async def start(self) -> None:
        self.server = grpc.aio.server(options=(
            ("grpc.max_send_message_length", 32 << 20), ("grpc.max_receive_message_length", 32 << 20),
            *SMALL_WINDOWS))
        self.server.add_generic_rpc_handlers((_Handlers(self),))
        self.server.add_insecure_port("unix://" + self.socket_path)
        await self.server.start()

    async def stop(self) -> None:
        if self.server:
            await self.server.stop(0)
            self.server = None


class _Handlers(grpc.GenericRpcHandler):
    def __init__(self, fake: FakeRuntime):
        self.f = fake

    def service(self, details):
        f = self.f
        name = details.method

        async def version(req: bytes, ctx):
            f.seen_metadata = {k: v for k, v in ctx.invocation_metadata()}
            f.seen_remaining = ctx.time_remaining()
            ctx.set_trailing_metadata((("x-runtime", "fake"),))
            return pb.VersionResponse(version="0.1.0", runtime_name="fake", runtime_version="1",
                                      runtime_api_version="v1").SerializeToString()

        async def echo(req: bytes, ctx):
            f.requests[name] = req
            ctx.set_trailing_metadata((("x-echo-len", str(len(req))),))
            return req

        async def canned(req: bytes, ctx):
            f.requests[name] = req
            return f.replies[name.rpartition("/")[2]]

        async def not_found(req: bytes, ctx):
            await ctx.abort(grpc.StatusCode.NOT_FOUND, "container \"abc\" not found",
                            (("x-reason", "gone"),))

        async def slow(req: bytes, ctx):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                f.cancelled.set()
                raise
            return b""

        async def events(req: bytes, ctx):
            for i in range(3):
                yield pb.ContainerEventResponse(container_id=f"c{i}").SerializeToString()

        async def big(req: bytes, ctx):
            n = int(req.decode() or "0")
            return pb.ListContainersResponse(containers=[
                pb.Container(id=f"{i:064d}", labels={"pad": "x" * 1000}) for i in range(n)]).SerializeToString()

        async def streamed(req: bytes, ctx):
            f.requests[name] = req
            try:
                for i, message in enumerate(f.streamed[STREAMS[name]]):
                    if i == f.stream_fails:
                        await ctx.abort(grpc.StatusCode.UNAVAILABLE, "fake: the runtime lost its listing")
                    if i and f.stream_gate is not None:
                        await f.stream_gate.wait()
                    yield message
            except asyncio.CancelledError:
                f.stream_cancelled.set()
                raise

        async def runtime_config(req: bytes, ctx):
            f.requests[name] = req
            return f.runtime_config.SerializeToString()

        if name.rpartition("/")[2] in f.replies:
            return grpc.unary_unary_rpc_method_handler(canned)
        if name in STREAMS:
            return grpc.unary_stream_rpc_method_handler(streamed) if f.streaming else None
        if name == V1 + "RuntimeConfig":  # None: UNIMPLEMENTED, as containerd 1.6 and 1.7
            return grpc.unary_unary_rpc_method_handler(runtime_config) if f.runtime_config is not None else None
        if name == V1 + "Version":
            return grpc.unary_unary_rpc_method_handler(version)
        if name == V1 + "ContainerStatus":
            return grpc.unary_unary_rpc_method_handler(not_found)
        if name == V1 + "StopContainer":
            return grpc.unary_unary_rpc_method_handler(slow)
        if name == V1 + "GetContainerEvents":
            return grpc.unary_stream_rpc_method_handler(events)
        async def total(requests, ctx):
            return str(sum([len(r) async for r in requests])).encode()

        if name == "/test.Sum/Total":
            return grpc.stream_unary_rpc_method_handler(total)
        async def half_second(req: bytes, ctx):
            await asyncio.sleep(0.5)
            return req

        if name == "/test.Slow/Half":
            return grpc.unary_unary_rpc_method_handler(half_second)
        if name == "/test.Big/List":
            return grpc.unary_unary_rpc_method_handler(big)
        if name.startswith("/runtime.v1.RuntimeService/Unknown") or name in f.unimplemented:
            return None  # UNIMPLEMENTED by gRPC itself
        return grpc.unary_unary_rpc_method_handler(echo)
