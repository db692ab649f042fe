"""kubelet's 16 MiB: list replies of 5-16 MiB (thousands of containers with labels and
annotations) pass both legs of the relay, observed by crash detection or not, and so does an
intercepted request of that size; one byte beyond, the caller gets the error kubelet gets
from the runtime. Both transports, against the runtime double serving replies of an exact
size (tests/transport/sized_replies.py); the real containerd's part is in
tests/e2e/test_big_list_containerd.py."""

from __future__ import annotations

import asyncio
import re

import grpc
import pytest
from sized_replies import KINDS, MiB, sized_reply
from test_relay_transport import V1, Setup

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.engine import exits
from cri_resmgr.transport.upstream import MAX_MESSAGE_BYTES

KUBELET_LIMIT = 16 * MiB  # kubelet's CRI client: grpc.MaxCallRecvMsgSize(16 MiB)
SIZES = (5 * MiB, 12 * MiB, KUBELET_LIMIT)
# grpc-go's words, which kubelet reads from containerd (and says itself of a reply).
TOO_LARGE = "grpc: received message larger than max ({} vs. 16777216)"


@pytest.fixture(params=["h2", "grpc"])
def transport(request):
    return request.param


@pytest.fixture
def make(tmp_path, transport):
    made = []

    def _make(interceptors=None):
        s = Setup(tmp_path / str(len(made)), transport=transport, interceptors=interceptors)
        s.kubelet = grpc.insecure_channel("unix://" + s.relay_sock,
                                          options=[("grpc.max_receive_message_length", KUBELET_LIMIT)])
        made.append(s)
        return s

    for i in range(3):
        (tmp_path / str(i)).mkdir()
    yield _make
    for s in made:
        s.kubelet.close()
        s.close()


def kubelet_call(s, method: str, request: bytes = b"") -> bytes:
    return s.kubelet.unary_unary(V1 + method)(request, timeout=60)


def test_the_limit_is_kubelets():
    assert MAX_MESSAGE_BYTES == KUBELET_LIMIT


@pytest.mark.parametrize("method", sorted(KINDS))
def test_big_list_replies_pass_unobserved(make, method):
    s = make()
    for size in SIZES:
        s.fake.replies[method] = reply = sized_reply(method, size)
        assert kubelet_call(s, method) == reply


def test_a_big_list_containers_reply_passes_observed_and_is_read(make, transport):
    """Crash detection's own scan (engine/exits.py) reads every size, and the reply's status
    waits for its work, as with a small one."""
    found: list[list[str]] = []

    async def released() -> None:
        await asyncio.sleep(0)

    def on_exit(ids: list[str]):
        found.append(ids)
        return released()

    s = make(exits.interceptors(on_exit, lambda ids: ids))
    for size in SIZES:
        reply = sized_reply("ListContainers", size, exited=2500)
        s.fake.replies["ListContainers"] = reply
        got = kubelet_call(s, "ListContainers")
        if transport == "h2":
            assert got == reply  # passed on as it came, a copy read
        else:  # called as an interceptor: decoded and encoded again, its maps in another order
            assert len(got) == size
            assert pb.ListContainersResponse.FromString(got) == pb.ListContainersResponse.FromString(reply)
        assert found[-1] == [f"{2500:064x}"]
    assert len(found) == len(SIZES)
    if transport == "h2":
        assert s.relay.held.used == 0


@pytest.mark.parametrize("observed", [False, True], ids=["unobserved", "observed"])
def test_a_reply_beyond_kubelets_limit_fails_as_it_would_from_the_runtime(make, transport, observed):
    seen: list[list[str]] = []
    s = make(exits.interceptors(lambda ids: seen.append(ids), lambda ids: ids) if observed else None)
    s.fake.replies["ListContainers"] = sized_reply("ListContainers", KUBELET_LIMIT + 1, exited=10)
    with pytest.raises(grpc.RpcError) as e:
        kubelet_call(s, "ListContainers")
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    if transport == "h2":
        # The frames pass as they are: the caller's own gRPC refuses the reply, as it would
        # the runtime's (kubelet's grpc-go says TOO_LARGE, this grpcio its own words).
        direct = grpc.insecure_channel("unix://" + s.runtime_sock,
                                       options=[("grpc.max_receive_message_length", KUBELET_LIMIT)])
        with pytest.raises(grpc.RpcError) as d:
            direct.unary_unary(V1 + "ListContainers")(b"", timeout=60)
        direct.close()
        assert (e.value.code(), e.value.details()) == (d.value.code(), d.value.details())
        assert s.relay.held.used == 0
    else:
        # The relay's own channel refuses it; the caller gets grpc-go's words for it.
        assert e.value.details() == TOO_LARGE.format(KUBELET_LIMIT + 1)
    assert kubelet_call(s, "Version", pb.VersionRequest().SerializeToString())  # the connection is fine


def _create(size: int) -> bytes:
    """A CreateContainer request of exactly `size` bytes, mostly annotations."""
    req = pb.CreateContainerRequest(pod_sandbox_id="p")
    req.config.annotations["big"] = ""
    req.config.annotations["big"] = "a" * (size - req.ByteSize() - 4)
    while req.ByteSize() != size:
        req.config.annotations["big"] = "a" * (len(req.config.annotations["big"]) + size - req.ByteSize())
    return req.SerializeToString()


def test_an_intercepted_request_of_kubelets_limit_passes(make):
    rewritten: list[int] = []

    async def create(req):
        rewritten.append(len(req.message.config.annotations["big"]))
        return await req.forward(req.message)

    s = make({"CreateContainer": create})
    for size in SIZES:
        request = _create(size)
        assert kubelet_call(s, "CreateContainer", request) == request  # the double echoes it
        assert s.fake.requests[V1 + "CreateContainer"] == request
    assert len(rewritten) == len(SIZES)


def test_an_intercepted_request_beyond_the_limit_is_refused_as_the_runtime_refuses_it(make, transport):
    s = make({"CreateContainer": lambda req: req.forward(req.message)})
    with pytest.raises(grpc.RpcError) as e:
        kubelet_call(s, "CreateContainer", _create(KUBELET_LIMIT + 1))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    if transport == "h2":
        assert e.value.details() == TOO_LARGE.format(KUBELET_LIMIT + 1)  # containerd's words
    else:
        # grpcio's server refuses it before any handler runs, in its own words.
        assert re.fullmatch(r"SERVER: Received message larger than max \(16777217 vs\. 16777216\)",
                            e.value.details())
    assert V1 + "CreateContainer" not in s.fake.requests
