"""What a client can make the frame relay hold, and the bounds on it.

The relay passes frames on as they come, so most of what a client sends is
never held. What is held, and its bound (docs/transport.md has the sums):

* an incomplete frame: up to SETTINGS_MAX_FRAME_SIZE (the runtime's, 16 KiB by
  default) plus its 9-byte header, per direction of a connection;
* a header block being read: up to `header_block` bytes per connection;
* the HPACK reader's cache of decoded strings: `hpack_cache` bytes per direction;
* intercepted request bodies (held whole until the interceptor runs) and the
  copies of their replies: `held_total` bytes across all connections, each
  request at most `max_message`, as the runtime's own limit;
* connections: at most `max_connections` at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from cri_resmgr.transport.upstream import MAX_MESSAGE_BYTES


@dataclass(frozen=True)
class Limits:
    # One intercepted request's gRPC message: containerd's and CRI-O's default
    # receive limit, so a request the runtime would take is never refused here.
    max_message: int = MAX_MESSAGE_BYTES
    # Intercepted request bodies and reply copies held at once, all connections:
    # four maximum-size requests; kubelet's are a few KiB.
    held_total: int = 64 << 20
    # A client header block when the runtime advertises no
    # SETTINGS_MAX_HEADER_LIST_SIZE (gRPC's own default is 8 KiB; CRI sends ~300 bytes).
    header_block: int = 64 << 10
    # A runtime-advertised SETTINGS_MAX_HEADER_LIST_SIZE is honoured up to this.
    header_block_ceiling: int = 1 << 20
    # A runtime's header block (trusted, but never held without a bound).
    runtime_header_block: int = 1 << 20
    # Decoded HPACK strings cached per direction, by bytes.
    hpack_cache: int = 64 << 10
    # Client connections at once; each pairs with a runtime connection.
    max_connections: int = 1024


class HeldBudget:
    """Bytes of intercepted calls held across all connections."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give_back(self, n: int) -> None:
        self.used -= n
