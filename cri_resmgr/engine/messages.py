"""The CRI messages the engine receives, as the types it reads them as.

The transport contract carries requests and replies as plain protobuf
`Message`s, decoded with runtime.v1 classes (v1alpha2 is wire-identical). These
helpers check that, so the engine reads typed fields rather than assuming them.
(The engine's own runtime calls go through its typed runtime port, `runtime.py`.)
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import Message

from cri_resmgr.transport.contract import Request

M = TypeVar("M", bound=Message)


def expect(message: Message, kind: type[M], what: str) -> M:
    """`message` as a `kind`; anything else is a bug in whoever decoded it."""
    if not isinstance(message, kind):
        raise TypeError(f"{what}: expected {kind.__name__}, got {type(message).__name__}")
    return message


def request(req: Request, kind: type[M]) -> M:
    """The intercepted request, as the transport decoded it."""
    return expect(req.message, kind, f"{req.name} request")


async def forward(req: Request, message: Message, kind: type[M]) -> M:
    """Sends `message` on the caller's call; returns the runtime's reply as a `kind`."""
    return expect(await req.forward(message), kind, f"{req.name} reply")

