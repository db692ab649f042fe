"""The frame relay: CRI relayed as HTTP/2 frames, with no gRPC stack in between.

Each connection from kubelet gets one connection to the runtime, and frames
pass between the two as they come, so settings, flow control, pings and
header compression stay between kubelet and the runtime. The relay reads only
what it must:

* the `:path` of each new call, to look its route up (cached per known method);
* for a call the policy intercepts, the request body (held back, decoded,
  handed to the interceptor, re-encoded and sent on the same stream) and a
  copy of the runtime's reply; the reply's final status is held back until
  the interceptor is done, so the client's call completes after the policy's
  bookkeeping, and is then passed on unchanged (or replaced by the
  interceptor's error);
* for an observed call (a `ReplyObserver` entry: crash detection), a copy of
  the reply for the observer's scan; the status waits only for work it returns;
* for an observed stream (a `StreamObserver` entry: StreamContainers), each reply
  message for the call's reading as it passes, never held back; the reading is
  completed only by an OK status, and the status waits only for work it returns;
* for a dumped call, copies of its messages and its final status.

Both ends are told (through the SETTINGS frames passing by) to use no HPACK
dynamic table, so a header block the relay holds back or answers itself cannot
desynchronise the peers' decoders. The reply direction is never altered in
size. In the request direction, bytes the relay swallows are given back to the
client with WINDOW_UPDATE, bytes a rewrite adds are taken off the runtime's
next grants to the client, and nothing is sent beyond the runtime's real
window (the relay tracks it and waits for grants).

If the runtime cannot be reached when kubelet connects, the relay answers every
call with UNAVAILABLE and, once the runtime is back, sends GOAWAY so kubelet
reconnects straight away.

Files: `relay.py` (the socket, routes per path, each connection's two sides),
`connection.py` (the frames of one connection, both ways), `intercepting.py`
(running an intercepted call on it), `observing.py` (a call whose reply is only
read, for crash detection), `calls.py` (per-call state),
`unreachable.py` (serving while the runtime is down), `frames.py` and
`headerblock.py` (HTTP/2 frames and HPACK, as far as the relay reads them),
`limits.py` (what a client can make the relay hold; docs/transport.md).
"""
