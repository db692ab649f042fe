"""What a client can make the relay hold, and its answer to malformed input
(docs/transport.md, "What a client can make the relay hold").

Frames are crafted byte by byte (tests/harness/h2raw.py) against the relay in front of
the in-process runtime double; the big intercepted request is also sent through
the gRPC transport here, and through the real containerd with the static policy
in test_policy_containerd.py.
"""

from __future__ import annotations

import logging
import threading

import grpc
import pytest
from test_relay_transport import V1, Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.transport.framerelay import frames as h2
from cri_resmgr.transport.framerelay.limits import Limits
from cri_resmgr.transport.methods import MethodTable
from tests.harness.h2raw import RawClient, message, request_block

CREATE = V1 + "CreateContainer"
LIST = V1 + "ListContainers"
MiB = 1 << 20


async def passthrough(req):
    return await req.forward(req.message)


def _create(pod: str, pad: int = 0) -> bytes:
    req = pb.CreateContainerRequest(pod_sandbox_id=pod)
    if pad:
        req.config.annotations["kubectl.kubernetes.io/last-applied-configuration"] = "p" * pad
    return req.SerializeToString()


@pytest.fixture
def make(tmp_path):
    made = []

    def _make(transport="h2", **kw):
        s = Setup(tmp_path / str(len(made)), transport=transport,
                  interceptors=kw.pop("interceptors", {"CreateContainer": passthrough}), **kw)
        made.append(s)
        return s

    yield _make
    for s in made:
        s.close()


@pytest.fixture(autouse=True)
def _dirs(tmp_path):
    for i in range(4):
        (tmp_path / str(i)).mkdir()


# -- 1. big intercepted requests -------------------------------------------------------

@pytest.mark.parametrize("transport", ["h2", "grpc"])
@pytest.mark.parametrize("size", [66 << 10, 256 << 10, 4 * MiB])
def test_intercepted_request_larger_than_the_window_is_answered(make, transport, size):
    s = make(transport)
    for i in range(3):  # the connection's windows stay balanced afterwards
        echoed = pb.CreateContainerRequest.FromString(s.call(CREATE, _create(f"p{i}", pad=size), timeout=10))
        assert echoed.pod_sandbox_id == f"p{i}"
        assert len(echoed.config.annotations["kubectl.kubernetes.io/last-applied-configuration"]) == size
    assert s.call(V1 + "Echo", b"x" * 100_000, timeout=10) == b"x" * 100_000


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_intercepted_request_above_the_runtime_limit_is_resource_exhausted(make, transport):
    s = make(transport)
    with pytest.raises(grpc.RpcError) as e:
        s.call(CREATE, _create("big", pad=20 * MiB), timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in e.value.details()
    assert CREATE not in s.fake.requests
    assert s.call(V1 + "Echo", b"after", timeout=10) == b"after"
    if transport == "h2":
        assert s.relay.held.used == 0


def test_declared_length_above_the_limit_is_refused_from_the_prefix(make):
    s = make()
    c = RawClient(s.relay_sock)
    c.headers(1, CREATE)
    c.data(1, message(b"", declared=0xFFFFFFFF))
    code, text = c.status(1)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert f"({0xFFFFFFFF} vs. {16 * MiB})" in text
    rst = c.until(lambda f: f[0] == h2.RST_STREAM and f[2] == 1)
    assert int.from_bytes(rst[3], "big") == h2.NO_ERROR  # asks the client to stop sending
    c.data(1, b"z" * 50_000)  # still in flight: dropped, and the window given back
    c.headers(3, V1 + "Echo")
    c.data(3, message(b"next"), end_stream=True)
    assert c.status(3) == (0, "")
    assert s.relay.held.used == 0
    c.close()


def test_held_requests_beyond_the_relay_budget_are_refused_and_released(make):
    s = make(limits=Limits(held_total=300_000))
    with pytest.raises(grpc.RpcError) as e:
        s.call(CREATE, _create("p", pad=400_000), timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "too many large requests" in e.value.details()
    for i in range(5):  # each one's share (request and reply copy) comes back when it ends
        s.call(CREATE, _create(f"q{i}", pad=140_000), timeout=10)
    assert s.relay.held.used == 0


def test_reply_copies_count_against_the_budget(make):
    s = make(limits=Limits(held_total=300_000), interceptors={"ListContainers": passthrough})
    req = pb.ListContainersRequest(filter=pb.ContainerFilter(label_selector={"pad": "l" * 200_000}))
    # The double echoes the request: reserving it (200 KB) leaves no room for the reply's copy.
    with pytest.raises(grpc.RpcError) as e:
        s.call(LIST, req.SerializeToString(), timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "reply could not be held" in e.value.details()
    assert s.relay.held.used == 0
    small = pb.ListContainersRequest(filter=pb.ContainerFilter(id="c1")).SerializeToString()
    assert s.call(LIST, small, timeout=10) == small


# -- 2. flow control on held bodies ---------------------------------------------------

def test_client_ignoring_flow_control_on_a_held_body_gets_flow_control_error(make):
    s = make()
    c = RawClient(s.relay_sock)
    c.headers(1, CREATE)
    body = message(b"m" * (MiB - 5 - 5), declared=MiB - 5)  # 1 MiB granted once the prefix is read
    blast = body + b"x" * (8 * MiB)  # then 8 MiB more, never waiting for a WINDOW_UPDATE
    sender = threading.Thread(target=lambda: _send_quietly(c, 1, blast))
    sender.start()
    rst = c.until(lambda f: f[0] == h2.RST_STREAM and f[2] == 1)
    assert int.from_bytes(rst[3], "big") == h2.FLOW_CONTROL_ERROR
    sender.join()
    assert s.relay.held.used == 0
    assert CREATE not in s.fake.requests
    c.headers(3, V1 + "Echo")
    c.data(3, message(b"still here"), end_stream=True)
    assert c.status(3) == (0, "")
    c.close()


def _send_quietly(c: RawClient, sid: int, data: bytes) -> None:
    try:
        c.data(sid, data)
    except OSError:
        pass


# -- 3. the route cache -------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_made_up_paths_do_not_grow_the_route_cache(make, transport):
    s = make(transport)
    for i in range(1500):
        assert s.call(f"/made.Up/Method{i}", b"u", timeout=10) == b"u"
    s.call(V1 + "Version", b"")
    cache = s.relay._routes if transport == "h2" else s.relay._handlers
    assert 0 < len(cache) <= len(MethodTable())


# -- 4. frame size ---------------------------------------------------------------------------

def test_frame_longer_than_max_frame_size_is_refused_from_its_header(make):
    s = make()
    c = RawClient(s.relay_sock)
    c.headers(1, V1 + "Echo")
    c.send(h2.header(16 * MiB - 1, h2.DATA, 0, 1) + b"\x00" * 1000)  # and the rest never comes
    assert c.goaway() == h2.FRAME_SIZE_ERROR
    assert c.until(lambda f: False) is None  # then the connection is closed
    assert not s.relay.connections
    assert s.call(V1 + "Echo", b"others", timeout=10) == b"others"


# -- 5. header blocks ----------------------------------------------------------------------------

def test_continuation_flood_closes_the_connection(make):
    s = make()
    c = RawClient(s.relay_sock)
    c.send(h2.frame(h2.HEADERS, 0, 1, request_block(V1 + "Echo")))
    try:
        for _ in range(100):  # 1.6 MB of one header block, 64 KiB allowed
            c.send(h2.frame(h2.CONTINUATION, 0, 1, b"\x00" * 16000))
    except OSError:
        pass  # closed under us: what the test wants
    assert c.goaway() == h2.ENHANCE_YOUR_CALM
    assert not s.relay.connections


def test_a_frame_inside_a_header_block_is_a_protocol_error(make):
    s = make()
    c = RawClient(s.relay_sock)
    c.send(h2.frame(h2.HEADERS, 0, 1, request_block(V1 + "Echo")))
    c.send(h2.frame(h2.PING, 0, 0, b"\x00" * 8))
    assert c.goaway() == h2.PROTOCOL_ERROR


def test_runtime_advertised_header_list_size_is_the_limit(make):
    s = make()
    s.call(V1 + "Version", b"")
    [conn] = list(s.relay.connections)
    assert conn.header_limit <= Limits().header_block  # gRPC's C core advertises 16 KiB
    conn._runtime_settings(h2.SETTINGS_MAX_HEADER_LIST_SIZE.to_bytes(2, "big") + (8192).to_bytes(4, "big"))
    assert conn.header_limit == 8192
    conn._runtime_settings(h2.SETTINGS_MAX_HEADER_LIST_SIZE.to_bytes(2, "big") + (1 << 30).to_bytes(4, "big"))
    assert conn.header_limit == Limits().header_block_ceiling


# -- connections ------------------------------------------------------------------------------

def test_connections_beyond_the_limit_are_turned_away(make):
    s = make(limits=Limits(max_connections=2))
    a, b = RawClient(s.relay_sock), RawClient(s.relay_sock)
    for c, sid in ((a, 1), (b, 1)):
        c.headers(sid, V1 + "Echo")
        c.data(sid, message(b"in"), end_stream=True)
        assert c.status(sid) == (0, "")
    third = RawClient(s.relay_sock)
    assert third.until(lambda f: False) is None  # closed at once
    a.close()
    fourth = RawClient(s.relay_sock)
    for _ in range(50):  # the relay notices `a` is gone
        fourth.headers(1, V1 + "Echo")
        fourth.data(1, message(b"in"), end_stream=True)
        if fourth.status(1) == (0, ""):
            break
    b.close()
    fourth.close()


# -- 7. log amplification -------------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_malformed_intercepted_requests_log_one_line_each_without_traceback(make, transport, caplog):
    s = make(transport)
    caplog.set_level(logging.DEBUG)
    for _ in range(100):
        with pytest.raises(grpc.RpcError) as e:
            s.call(CREATE, b"\xff\xff\xff\xff", timeout=10)
        assert e.value.code() == grpc.StatusCode.INTERNAL
        assert "cannot decode the CreateContainer request" in e.value.details()
    relay_records = [r for r in caplog.records if r.name.startswith("cri_resmgr")]
    assert len(relay_records) == 100
    assert all("CreateContainer" in r.getMessage() and r.exc_info is None for r in relay_records)


@pytest.mark.parametrize("transport", ["h2", "grpc"])
def test_interceptor_bug_logs_one_line_each_and_a_rate_limited_traceback(make, transport, caplog):
    async def buggy(req):
        raise KeyError("oops")

    s = make(transport, interceptors={"CreateContainer": buggy})
    caplog.set_level(logging.DEBUG)
    for _ in range(50):
        with pytest.raises(grpc.RpcError) as e:
            s.call(CREATE, _create("p"), timeout=10)
        assert e.value.code() == grpc.StatusCode.INTERNAL
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name.startswith("cri_resmgr")]
    assert len(errors) == 50 and all("KeyError" in r.getMessage() for r in errors)
    tracebacks = [r for r in caplog.records if r.exc_info and r.name.startswith("cri_resmgr")]
    assert len(tracebacks) == 1 and tracebacks[0].levelno == logging.DEBUG
