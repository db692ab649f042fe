"""The relay's answer to malformed input is at least as strict as containerd's.

Each input is sent byte by byte (tests/harness/h2raw.py) on a new connection, once
straight to the real containerd and once to the relay in front of it with the
static policy active (so CreateContainer is intercepted and its body held), and
the two answers are compared: a closed connection is stricter than a reset
stream, which is stricter than an error status.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hpack.hpack import encode_integer

from cri_resmgr.transport.framerelay import frames as h2
from tests.harness.h2raw import RawClient, message, request_block
from tests.harness.relayproc import RelayProcess

V1 = "/runtime.v1.RuntimeService/"
CREATE = V1 + "CreateContainer"
MiB = 1 << 20


def _quiet(send) -> None:
    try:
        send()
    except OSError:  # the peer closed under us: its answer is still read
        pass


def frame_longer_than_max_frame_size(c: RawClient) -> None:
    c.headers(1, V1 + "Version")
    _quiet(lambda: c.send(h2.header(16 * MiB - 1, h2.DATA, 0, 1) + b"\0" * 1000))


def frame_inside_a_header_block(c: RawClient) -> None:
    c.send(h2.frame(h2.HEADERS, 0, 1, request_block(V1 + "Version")))
    _quiet(lambda: c.send(h2.frame(h2.PING, 0, 0, b"\0" * 8)))


def continuation_without_headers(c: RawClient) -> None:
    c.send(h2.frame(h2.CONTINUATION, h2.END_HEADERS, 1, request_block(V1 + "Version")))


def headers_on_stream_0(c: RawClient) -> None:
    c.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 0, request_block(V1 + "Version")))


def table_size_update_above_4096(c: RawClient) -> None:
    update = bytearray(encode_integer(8192, 5))
    update[0] |= 0x20
    c.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, bytes(update) + request_block(V1 + "Version")))


def bad_huffman_name(c: RawClient) -> None:
    block = request_block(V1 + "Version") + b"\x00\x84\xff\xff\xff\xff\x01v"
    c.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, block))


def padding_longer_than_the_frame(c: RawClient) -> None:
    c.headers(1, CREATE)
    c.send(h2.frame(h2.DATA, h2.PADDED | h2.END_STREAM, 1, b"\xff" + b"x" * 10))


def message_declared_above_16_mib(c: RawClient) -> None:
    c.headers(1, CREATE)
    c.data(1, message(b"", declared=0xFFFFFFFF))


def undecodable_protobuf(c: RawClient) -> None:
    c.headers(1, CREATE)
    c.data(1, message(b"\xff\xff\xff\xff"), end_stream=True)


def two_messages_in_a_unary_call(c: RawClient) -> None:
    c.headers(1, CREATE)
    c.data(1, message(b"") + message(b""), end_stream=True)


def data_past_the_stream_window(c: RawClient) -> None:
    c.headers(1, CREATE)
    body = message(b"m" * (MiB - 10), declared=MiB - 5) + b"x" * (8 * MiB)
    threading.Thread(target=lambda: _quiet(lambda: c.data(1, body)), daemon=True).start()


def continuation_flood(c: RawClient) -> None:
    c.send(h2.frame(h2.HEADERS, 0, 1, request_block(V1 + "Version")))

    def flood():
        for _ in range(100):
            c.send(h2.frame(h2.CONTINUATION, 0, 1, b"\x00" * 16000))
    _quiet(flood)


CASES = [frame_longer_than_max_frame_size, frame_inside_a_header_block, continuation_without_headers,
         headers_on_stream_0, table_size_update_above_4096, bad_huffman_name, padding_longer_than_the_frame,
         message_declared_above_16_mib, undecodable_protobuf, two_messages_in_a_unary_call,
         data_past_the_stream_window, continuation_flood]

CLOSED, RESET, ERROR, OK, NO_ANSWER = 3, 2, 1, 0, -1


def answer(socket_path: str, case) -> tuple[int, str]:
    """(strictness, what was seen) of the answer to `case` on stream 1."""
    c = RawClient(socket_path, timeout=10)
    try:
        case(c)
        f = c.until(lambda f: f[0] == h2.GOAWAY or (f[0] == h2.RST_STREAM and f[2] == 1)
                    or (f[0] == h2.HEADERS and f[2] == 1 and b"grpc-status" in f[3]))
    except TimeoutError:
        return NO_ANSWER, "no answer"
    except OSError as e:
        return CLOSED, f"closed ({e})"
    finally:
        c.close()
    if f is None or f[0] == h2.GOAWAY:
        return CLOSED, "closed" if f is None else f"GOAWAY {int.from_bytes(f[3][4:8], 'big')}"
    if f[0] == h2.RST_STREAM:
        return RESET, f"RST_STREAM {int.from_bytes(f[3], 'big')}"
    code = int(f[3][b"grpc-status"])
    return (ERROR if code else OK), f"status {code} {h2.status_message(f[3].get(b'grpc-message'))}"


@pytest.fixture(scope="module")
def relay(containerd, tmp_path_factory):
    d = Path(tmp_path_factory.mktemp("strict"))
    cfg = d / "config.yaml"
    cfg.write_text("policy:\n  Active: static\n  ReservedResources:\n    CPU: 1\n")
    proc = RelayProcess(d / "r", str(containerd.socket), ["-force-config", str(cfg)]).start()
    yield proc
    proc.stop()


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_relay_answers_malformed_input_at_least_as_strictly_as_containerd(containerd, relay, case):
    direct, direct_seen = answer(str(containerd.socket), case)
    relayed, relayed_seen = answer(relay.socket, case)
    assert relayed != NO_ANSWER, f"the relay did not answer; containerd: {direct_seen}"
    assert relayed >= direct, f"containerd: {direct_seen}; relay: {relayed_seen}"
    assert direct > OK  # every case is malformed
    c = RawClient(relay.socket)  # and the relay serves the next client
    c.headers(1, V1 + "Version")
    c.data(1, message(b""), end_stream=True)
    assert c.until(lambda f: f[0] == h2.HEADERS and f[2] == 1 and b"grpc-status" in f[3])[3][b"grpc-status"] == b"0"
    c.close()
