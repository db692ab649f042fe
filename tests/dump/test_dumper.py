"""The threaded Dumper: draining on close, nothing lost, private files, drops."""

import io
import json
import os
import stat
import threading
import time

import grpc
import pytest

from cri_resmgr._proto import runtime_v1_pb2 as pb
from cri_resmgr.dump import Dumper, DumpSpecError, Level
from cri_resmgr.transport.methods import MethodTable

RT = "/runtime.v1.RuntimeService/"
WAIT = 30  # generous upper bound for the writer thread to get somewhere; never a timing assertion


@pytest.fixture(scope="module")
def methods():
    return MethodTable()


class GatedStream(io.StringIO):
    """A stream whose writes wait for a gate, so a test can hold the writer thread."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def write(self, text):
        self.entered.set()
        assert self.gate.wait(WAIT), "test never opened the gate"
        return super().write(text)


def test_close_drains_everything_to_the_file(tmp_path, methods):
    path = tmp_path / "dump.log"
    n = 10000
    # The queue holds everything, so what close() writes is exactly what was captured.
    dumper = Dumper(["name:.*"], file=str(path), methods=methods, queue_size=2 * n)
    data = pb.StartContainerRequest(container_id="c" * 64).SerializeToString()
    for i in range(n):
        dumper.request(RT + "StartContainer", i, data)
        dumper.reply(RT + "StartContainer", i, b"", 0.001)
    dumper.close()
    assert dumper.dropped == 0
    lines = path.read_text().splitlines()
    requests = [line for line in lines if " => #" in line]
    replies = [line for line in lines if " <= #" in line]
    assert len(requests) == n and len(replies) == n
    assert {int(line.split("#")[1].split()[0]) for line in replies} == set(range(n))
    assert "dropped" not in path.read_text()


def test_file_is_private_and_appended(tmp_path, methods):
    path = tmp_path / "dump.jsonl"
    old_umask = os.umask(0o022)
    try:
        for text in ("first", "second"):
            dumper = Dumper(["full:.*"], file=str(path), fmt="jsonl", methods=methods)
            dumper.note(text)
            dumper.close()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [json.loads(line)["text"] for line in path.read_text().splitlines()] == ["first", "second"]


def test_stream_is_flushed_not_closed(methods):
    stream = io.StringIO()
    with Dumper(["full:Version"], stream=stream, methods=methods) as dumper:
        dumper.request(RT + "Version", 1, pb.VersionRequest(version="0.1.0").SerializeToString())
        dumper.reply(RT + "Version", 1, pb.VersionResponse(runtime_name="containerd").SerializeToString(), 0.002)
    assert not stream.closed
    text = stream.getvalue()
    assert "=> #1 Version\n    version: 0.1.0\n" in text
    assert "<= #1 Version 2.000ms\n    runtime_name: containerd\n" in text


def test_off_and_count_levels(methods):
    stream = io.StringIO()
    dumper = Dumper(["count:List.*", "full:Version"], stream=stream, count_period=3600, methods=methods)
    assert dumper.level(RT + "ListContainers") is Level.COUNT
    assert dumper.level(RT + "StartContainer") is Level.OFF
    for i in range(4):
        dumper.request(RT + "ListContainers", i, b"")
        dumper.reply(RT + "ListContainers", i, None, 0.1,
                     grpc.StatusCode.UNAVAILABLE if i == 0 else grpc.StatusCode.OK)
    dumper.request(RT + "StartContainer", 9, b"")  # level OFF: ignored even if called
    dumper.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines  # no per-message lines; one count block written at close
    assert "## calls in the last" in lines[0]
    assert lines[1] == "    ListContainers: 4 (1 failed)"


def test_counts_are_written_every_period(methods):
    stream = io.StringIO()
    dumper = Dumper(["count:.*"], stream=stream, count_period=0.05, methods=methods)
    try:
        dumper.request(RT + "Version", 1, b"")
        deadline = time.monotonic() + WAIT
        while "Version: 1" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "    Version: 1\n" in stream.getvalue()
    finally:
        dumper.close()
    assert stream.getvalue().count("Version: 1") == 1  # counts reset after each report


def test_failed_call_through_dumper(methods):
    stream = io.StringIO()
    dumper = Dumper(["full:StopContainer"], stream=stream, methods=methods)
    dumper.request(RT + "StopContainer", 5, pb.StopContainerRequest(container_id="ab" * 32).SerializeToString())
    dumper.reply(RT + "StopContainer", 5, None, 0.25, grpc.StatusCode.NOT_FOUND, "no such container")
    dumper.close()
    assert stream.getvalue().splitlines()[-1].endswith(
        "<= #5 StopContainer [" + "ab" * 6 + "a] 250.000ms ERROR NOT_FOUND: no such container")


def test_full_queue_drops_and_reports(methods):
    stream = GatedStream()
    dumper = Dumper(["name:.*"], stream=stream, queue_size=5, methods=methods)
    dumper.note("hold")  # the writer takes this and then waits in write()
    assert stream.entered.wait(WAIT)
    for i in range(20):
        dumper.request(RT + "Version", i, b"")
    assert dumper.dropped == 15
    stream.gate.set()
    dumper.close()
    text = stream.getvalue()
    assert text.count(" => #") == 5
    assert "15 messages dropped (15 in total)" in text


def test_after_close_calls_are_harmless(methods):
    stream = io.StringIO()
    dumper = Dumper(["full:.*"], stream=stream, methods=methods)
    dumper.close()
    dumper.close()
    dumper.request(RT + "Version", 1, b"")
    dumper.note("late")
    assert "late" not in stream.getvalue()
    assert dumper.dropped == 2


class ExplodingTable(MethodTable):
    def lookup(self, path):
        if path.endswith("/Boom"):
            raise RuntimeError("table exploded")
        return super().lookup(path)


def test_writer_survives_a_failing_item():
    stream = io.StringIO()
    dumper = Dumper(["full:.*"], stream=stream, methods=ExplodingTable())
    dumper.request("/x.Y/Boom", 1, b"")
    dumper.request(RT + "Version", 2, b"")
    dumper.close()
    text = stream.getvalue()
    assert "RuntimeError: table exploded" in text
    assert "=> #2 Version" in text


def test_bad_arguments_fail_before_anything_starts(tmp_path, methods):
    path = tmp_path / "never.log"
    with pytest.raises(DumpSpecError, match="'loud'"):
        Dumper(["loud:.*"], file=str(path), methods=methods)
    with pytest.raises(ValueError, match="'xml'"):
        Dumper(["full:.*"], file=str(path), fmt="xml", methods=methods)
    with pytest.raises(ValueError, match="count period"):
        Dumper(["full:.*"], file=str(path), count_period=0, methods=methods)
    assert not path.exists()
    with pytest.raises(FileNotFoundError):
        Dumper(["full:.*"], file=str(tmp_path / "missing-dir" / "x.log"), methods=methods)


def test_dump_file_is_reopened_after_logrotate_moves_it(tmp_path):
    from cri_resmgr.dump import Dumper
    path = tmp_path / "cri.dump"
    d = Dumper(["full:.*"], file=str(path))
    try:
        d.note("before rotation")
        d.reopen()  # queued behind the note, so the note lands in the old file
        import time
        deadline = time.monotonic() + 5
        while "before rotation" not in path.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        path.rename(tmp_path / "cri.dump.1")  # what logrotate does, before its SIGHUP
        d.reopen()
        d.note("after rotation")
    finally:
        d.close()
    assert "after rotation" in path.read_text()
    assert "after rotation" not in (tmp_path / "cri.dump.1").read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_dump_file_size_cap_rotates_to_dot_1(tmp_path):
    from cri_resmgr.dump import Dumper
    path = tmp_path / "cri.dump"
    d = Dumper(["full:.*"], file=str(path), max_size=2000)
    try:
        for i in range(200):
            d.note(f"note {i:04d} " + "x" * 40)
    finally:
        d.close()
    old = tmp_path / "cri.dump.1"
    assert old.exists() and "note 0199" in path.read_text()
    assert path.stat().st_size < 2000 + 200 and old.stat().st_size < 2000 + 200  # one record past the cap at most
