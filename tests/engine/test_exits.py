"""Crash detection's reading of ListContainers, StreamContainers and ContainerStatus replies
(engine/exits.py)."""

from __future__ import annotations

import asyncio

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr._proto import runtime_v1alpha2_pb2 as pb2
from cri_resmgr.engine import exits
from cri_resmgr.transport.contract import ReplyObserver, Request, StreamObserver

EXITED, RUNNING, CREATED, UNKNOWN = (pb.CONTAINER_EXITED, pb.CONTAINER_RUNNING, pb.CONTAINER_CREATED,
                                     pb.CONTAINER_UNKNOWN)


def _container(cid: str, state: int) -> pb.Container:
    # Everything a real reply carries around the state, so the stripped decode must skip it.
    return pb.Container(id=cid, pod_sandbox_id="p" * 64, state=state, created_at=1_700_000_000_000_000_000,
                        metadata=pb.ContainerMetadata(name=cid, attempt=2),
                        image=pb.ImageSpec(image="busybox"), image_ref="sha256:" + "0" * 64,
                        labels={"io.kubernetes.pod.name": "x", "state": "0\x02"},
                        annotations={"a": "\x30\x02" * 10})


def _listed(*containers: pb.Container) -> bytes:
    return pb.ListContainersResponse(containers=containers).SerializeToString()


def test_list_names_only_the_exited_containers():
    reply = _listed(_container("a", RUNNING), _container("b", EXITED), _container("c", CREATED),
                    _container("d", EXITED), _container("e", UNKNOWN))
    assert exits.exited_in_list(reply) == ["b", "d"]
    assert exits.exited_in_list(memoryview(reply)) == ["b", "d"]


def test_list_without_exits_even_if_strings_hold_the_coded_state():
    # Labels and annotations above hold the bytes of "state: EXITED"; only the field counts.
    assert exits.exited_in_list(_listed(*[_container(f"c{i}", RUNNING) for i in range(50)])) == []
    assert exits.exited_in_list(_listed()) == []


def test_list_of_v1alpha2_reads_the_same():
    reply = pb2.ListContainersResponse(containers=[pb2.Container(id="x", state=pb2.CONTAINER_EXITED),
                                                   pb2.Container(id="y", state=pb2.CONTAINER_RUNNING)])
    assert exits.exited_in_list(reply.SerializeToString()) == ["x"]


def test_status_names_the_container_only_when_exited():
    def status(state: int) -> bytes:
        return pb.ContainerStatusResponse(status=pb.ContainerStatus(id="abc", state=state, exit_code=3),
                                          info={"info": "{}"}).SerializeToString()
    assert exits.exited_in_status(status(EXITED)) == ["abc"]
    assert exits.exited_in_status(status(RUNNING)) == []
    assert exits.exited_in_status(b"") == []


def test_undecodable_replies_show_no_exits():
    assert exits.exited_in_list(b"\x0a\xff\xff\xff\xff\x0f") == []
    assert exits.exited_in_status(b"\x0a\x05\x0a") == []


def test_scan_waits_only_when_there_is_something_to_do():
    seen: list[list[str]] = []
    waited: list[str] = []

    async def release(ids: list[str]) -> None:
        waited.extend(ids)

    def on_exit(ids: list[str]):
        seen.append(ids)
        return release(ids) if ids != ["known-released"] else None

    table = exits.interceptors(on_exit, lambda ids: ids)
    assert set(table) == {"ListContainers", "StreamContainers", "ContainerStatus"}
    observer = table["ListContainers"]
    assert isinstance(observer, ReplyObserver)
    scan = observer.scan
    assert scan(_listed(_container("a", RUNNING))) is None
    assert seen == []  # no exits: the engine is not even asked
    assert scan(_listed(_container("known-released", EXITED))) is None
    pending = scan(_listed(_container("b", EXITED)))
    assert pending is not None
    asyncio.run(pending)  # type: ignore[arg-type]
    assert waited == ["b"]


def test_observer_as_a_plain_interceptor_forwards_unchanged_and_waits():
    """What the gRPC transport does with it: forward, scan the re-serialized reply, wait."""
    order: list[str] = []
    reply = pb.ListContainersResponse(containers=[_container("z", EXITED)])

    async def forward(message):
        order.append("forward")
        return reply

    async def work() -> None:
        order.append("work")

    def scan(data):
        order.append(f"scan {exits.exited_in_list(data)}")
        return work()

    observer = ReplyObserver(scan)
    request = pb.ListContainersRequest()
    out = asyncio.run(observer(Request("ListContainers", "/runtime.v1.RuntimeService/ListContainers", request,
                                       forward)))
    assert out is reply
    assert order == ["forward", "scan ['z']", "work"]


def _streamed(*containers: pb.Container) -> bytes:
    return pb.StreamContainersResponse(containers=containers).SerializeToString()


def _stream_observer(released: list[list[str]], held: set[str]) -> StreamObserver:
    async def release(ids: list[str]) -> None:
        released.append(ids)

    def on_exit(ids: list[str]):
        return release(ids)

    observer = exits.interceptors(on_exit, lambda ids: [i for i in ids if i in held])["StreamContainers"]
    assert isinstance(observer, StreamObserver)
    return observer


def test_a_stream_keeps_only_exited_containers_still_held_and_releases_them_once_complete():
    released: list[list[str]] = []
    reading = _stream_observer(released, held={"b", "d"}).start()
    reading.message(_streamed(_container("a", RUNNING), _container("b", EXITED)))
    reading.message(memoryview(_streamed(_container("c", EXITED), _container("d", EXITED))))
    reading.message(_streamed(_container("b", EXITED)))  # a runtime repeating one: once
    reading.message(_streamed())
    assert released == []  # nothing before the stream is complete
    pending = reading.complete()
    assert pending is not None
    asyncio.run(pending)  # type: ignore[arg-type]
    assert released == [["b", "d"]]  # "c" exited but holds nothing: never kept


def test_a_stream_with_nothing_held_exited_waits_for_nothing():
    released: list[list[str]] = []
    reading = _stream_observer(released, held={"x"}).start()
    reading.message(_streamed(_container("a", RUNNING), _container("b", EXITED)))
    reading.message(b"\x0a\xff\xff\xff\xff\x0f")  # undecodable: shows no exits
    assert reading.complete() is None


def test_each_stream_has_its_own_reading():
    released: list[list[str]] = []
    observer = _stream_observer(released, held={"b"})
    first, second = observer.start(), observer.start()
    first.message(_streamed(_container("b", EXITED)))
    assert second.complete() is None


def test_stream_observer_as_a_plain_interceptor_reads_the_one_reply():
    """What the simulator does with a recorded StreamContainers: one message, complete."""
    released: list[list[str]] = []
    reply = pb.StreamContainersResponse(containers=[_container("z", EXITED)])

    async def forward(message):
        return reply

    observer = _stream_observer(released, held={"z"})
    request = pb.StreamContainersRequest()
    out = asyncio.run(observer(Request("StreamContainers", "/runtime.v1.RuntimeService/StreamContainers", request,
                                       forward)))
    assert out is reply
    assert released == [["z"]]


def test_small_messages_read_together_and_a_large_one_where_it_lies_miss_no_exit():
    """CRI-O's one container a message, read 64 KiB at a time, with a message larger than
    that amid them: every exited container still held is found, in the order streamed."""
    released: list[list[str]] = []
    held = {f"x{i}" for i in range(0, 400, 7)} | {"big-exited"}
    reading = _stream_observer(released, held=held).start()
    for i in range(400):
        reading.message(_streamed(_container(f"x{i}", EXITED if i % 7 == 0 else RUNNING)))
        if i == 200:
            large = _streamed(*[_container(f"big{j}", RUNNING) for j in range(300)],
                              _container("big-exited", EXITED))
            assert len(large) > 64 << 10
            reading.message(memoryview(large))
    pending = reading.complete()
    assert pending is not None
    asyncio.run(pending)  # type: ignore[arg-type]
    want = [f"x{i}" for i in range(0, 201, 7)] + ["big-exited"] + [f"x{i}" for i in range(203, 400, 7)]
    assert released == [want]
