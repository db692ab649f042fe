"""What the engine asks of the runtime: typed unary CRI calls by path.

The relay's `transport.upstream.Upstream` is one (a gRPC channel to the runtime);
the NRI plugin's `nri.view.NriRuntime` is another (the runtime's state as NRI
reported it, and container updates sent back over NRI). A failed call raises
`grpc.aio.AioRpcError` in both, which is what the engine handles.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from google.protobuf.message import Message

R = TypeVar("R", bound=Message)


class RuntimeCalls(Protocol):
    @property
    def path(self) -> str:
        """Where the runtime is, for log lines and /readyz."""

    async def call(self, path: str, request: Message, reply_type: type[R],
                   timeout: float | None = 10.0) -> R: ...


def listing_complete(runtime: RuntimeCalls) -> bool:
    """Whether the runtime's ListPodSandbox/ListContainers name everything it runs. A CRI
    channel always does. The NRI plugin's view does not before the runtime's first
    Synchronize (containerd before 1.7.26 never sends one to a plugin it launched): it
    says so with a false `listing_complete` attribute, and then a container missing
    from a listing is not gone, only not heard of yet."""
    return bool(getattr(runtime, "listing_complete", True))
