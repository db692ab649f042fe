"""`cri-resmgr simulate` with hostile input (issue 28.7): each gives one short line
naming the file or flag and where, exit 2, no traceback, at a bounded cost.

The cases that would hang or exhaust memory before the fix run in a child process
under a memory limit and a timeout; the rest run in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cri_resmgr import cli
from cri_resmgr.simulate.calls import WorkloadError
from cri_resmgr.simulate.inputs import read_lines, read_text

MAX_LINE = 500  # "one line of at most a few hundred characters"
POD = "- name: p\n  containers: [{name: c}]\n"


def _bomb(levels: int = 9) -> str:
    """A YAML alias bomb under `bomb:` of a List: 9**levels values from a few hundred bytes."""
    text = '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    prev = "a"
    for name in "bcdefghijk"[:levels - 1]:
        text += f"  {name}: &{name} [" + ",".join(["*" + prev] * 9) + "]\n"
        prev = name
    return "kind: List\nbomb:\n" + text, prev


def _check(code: int, out: str, err: str, *says: str) -> None:
    lines = err.splitlines()
    assert code == 2, (code, err[:1000])
    assert len(lines) == 1 and "Traceback" not in err, err[:2000]
    assert lines[0].startswith("cri-resmgr simulate: error: ") and len(lines[0]) <= MAX_LINE, lines[0][:1000]
    for s in says:
        assert s in lines[0], lines[0]


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["simulate", "-policy", "static", *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def run_limited(*args: str, memory_mb: int = 1024, timeout: float = 60) -> tuple[int, str, str]:
    """In a child under an address-space limit: a MemoryError, a segfault or a hang fails the test."""
    # The limit is set by a launcher in the child, not by a preexec_fn: Python code run between
    # fork and exec in a pytest process where gRPC has started (other tests) lets gRPC's fork
    # handlers write to the child's stderr ("epoll_wait error: Bad file descriptor").
    launcher = ("import os, resource, sys; n = int(sys.argv[1]) << 20; "
                "resource.setrlimit(resource.RLIMIT_AS, (n, n)); "
                "os.execv(sys.executable, [sys.executable, '-m', 'cri_resmgr.cli', *sys.argv[2:]])")
    p = subprocess.run([sys.executable, "-c", launcher, str(memory_mb), "simulate", "-policy", "static", *args],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def files(tmp_path):
    def write(name: str, data: str | bytes) -> str:
        p = tmp_path / name
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
        return str(p)
    return write


# -- -shape, -churn and the other numbers -------------------------------------------------------


@pytest.mark.parametrize("shape, says", [
    ("1s/" + "9" * 500 + "c", "more than 9 digits"),
    ("1s/" + "9" * 5000 + "c", "longer than 1000 characters"),
    ("1s/4c/l3=" + "9" * 500, "more than 9 digits"),
    ("1s/4c/1hbm:" + "9" * 500 + "t", "more than 9 digits"),
    ("1s/4c/mem=" + "9" * 50 + "t", "more than 9 digits"),
    ("4c/mem=999999999t", "more memory than a NUMA node holds"),
    ("4c/2pmem:99999999g", "more memory than a NUMA node holds"),
    ("4c/" + "x" * 100_000, "longer than 1000 characters"),
    ("4c/l3=²", "unknown part"),  # not a digit int() would read
    ("١c", "unknown part"),
])
def test_bad_shapes(capsys, shape, says):
    _check(*run(capsys, "-shape", shape, "-churn", "4"), "shape '", says)


def test_a_shape_of_a_hundred_million_memory_nodes_is_refused_before_it_is_built():
    _check(*run_limited("-shape", "1s/1c/99999999hbm", "-churn", "4"), "100000000 NUMA nodes; at most 1024")


@pytest.mark.parametrize("args, says", [
    (["-churn", "5", "-seed", "9" * 5000], "invalid value for -seed: '99999999"),
    (["-churn", "9" * 100_000], "invalid value for -churn"),
])
def test_huge_numbers(capsys, args, says):
    _check(*run(capsys, "-shape", "4c", *args), says)


@pytest.mark.parametrize("args, says", [
    (["-churn", "99999999999"], "invalid value for -churn: 99999999999 is not in the range 1-100000"),
    (["-churn", "1000", "-live", "999999999999999"], "invalid value for -live"),
    (["-churn", "100000", "-live", "32768"], "-churn 100000 with about 32768 containers alive"),
])
def test_a_huge_churn_is_refused_not_run_for_hours_or_out_of_memory(args, says):
    _check(*run_limited("-shape", "2s/4n/64c/2t", *args, timeout=30), says)


# -- -pods, -topology, -dump: deep, not UTF-8, huge names, alias bombs -------------------------------


def test_deep_inputs(capsys, files):
    _check(*run(capsys, "-shape", "4c", "-pods", files("p.yaml", "- " + "[" * 100_000 + "]" * 100_000)),
           "p.yaml", "nested deeper than")
    _check(*run(capsys, "-topology", files("t.json", '{"a":' * 100_000 + "1" + "}" * 100_000), "-churn", "4"),
           "t.json", "nested deeper than")
    _check(*run(capsys, "-shape", "4c", "-dump", files("d.jsonl", "[" * 100_000 + "]" * 100_000 + "\n")),
           "d.jsonl:1", "nested deeper than")
    body = {"direction": "request", "service": "runtime.v1.RuntimeService", "method": "RunPodSandbox",
            "call_id": 1, "body": {"config": {"labels": {"x": "y"}}}}
    deep = json.dumps(body).replace('"y"', '{"a":' * 500 + "1" + "}" * 500)
    _check(*run(capsys, "-shape", "4c", "-dump", files("d2.jsonl", deep + "\n")), "d2.jsonl:1", "nested deeper")


def test_not_utf8(capsys, files):
    _check(*run(capsys, "-shape", "4c", "-pods", files("p.yaml", b"- name: caf\xe9\n  containers: [{name: c}]\n")),
           "pods file", "p.yaml: not UTF-8 text (byte 11")
    _check(*run(capsys, "-topology", files("t.json", b'{"x": "caf\xe9"}'), "-churn", "4"),
           "topology JSON", "t.json: not UTF-8 text")
    good = json.dumps({"direction": "note", "text": "x"})
    _check(*run(capsys, "-shape", "4c", "-dump", files("d.jsonl", (good + "\n").encode() + b'{"x": "\xff"}\n')),
           "d.jsonl:2: not UTF-8 text")


def test_a_ten_megabyte_pod_name_is_not_echoed(capsys, files):
    name = "a" * 10_000_000
    bad = f"- name: {name}\n  containers: [{{name: c, resources: {{limits: {{cpu: bogus}}}}}}]\n"
    _check(*run(capsys, "-shape", "4c", "-pods", files("p.yaml", bad)),
           "p.yaml: pod 1 (default/aaaa", "(10000000 characters)", "containers[0] (c): resources.limits.cpu")
    twice = f"- name: {name}\n  containers: [{{name: c}}]\n" * 2
    _check(*run(capsys, "-shape", "4c", "-pods", files("p2.yaml", twice)), "p2.yaml: pod 2: ", "is listed twice")
    big_key = f"- name: p\n  {'k' * 1000}: 1\n  containers: [{{name: c}}]\n"  # YAML's longest simple key
    _check(*run(capsys, "-shape", "4c", "-pods", files("p3.yaml", big_key)), "p3.yaml: pod 1: unknown keys")
    big_cpu = "- name: p\n  containers: [{name: c, resources: {limits: {cpu: " + "9" * 5000 + "}}}]\n"
    _check(*run(capsys, "-shape", "4c", "-pods", files("p4.yaml", big_cpu)), "p4.yaml", "a number of 5000 digits")


@pytest.mark.parametrize("use", [
    "  containers: [{name: c, resources: {limits: {cpu: *LAST}}}]\n",
    "  labels: {x: *LAST}\n  containers: [{name: c}]\n",
    "  uid: *LAST\n  containers: [{name: c}]\n",
    "  namespace: *LAST\n  containers: [{name: c}]\n",
])
def test_alias_bombs_are_refused_in_bounded_time_and_memory(files, use):
    bomb, last = _bomb()
    text = bomb + "items:\n- name: x\n" + use.replace("LAST", last)
    _check(*run_limited("-shape", "4c", "-pods", files("bomb.yaml", text), memory_mb=1024, timeout=60),
           "bomb.yaml", "more than 200000 values")


def test_keys_that_are_not_strings(capsys, files):
    _check(*run(capsys, "-shape", "4c", "-pods", files("p.yaml", "- {1: x, name: p, containers: [{name: c}]}\n")),
           "p.yaml: pod 1: unknown keys 1")
    text = "- name: p\n  containers: [{name: c, resources: {2: x, limits: {}}}]\n"
    _check(*run(capsys, "-shape", "4c", "-pods", files("p2.yaml", text)), "resources: unknown keys 2")


def test_dump_fields_of_the_wrong_kind(capsys, files):
    base = {"direction": "request", "service": "runtime.v1.RuntimeService", "method": "Version", "call_id": 1,
            "body": {}}
    for field, value, says in (("time", ["x"] * 1000, "time: ['x', 'x'"), ("code", {"a": 1}, "code: expected"),
                               ("call_id", "n" * 10_000, "call_id: expected an integer, got 'nnnn"),
                               ("call_id", "BIG", "not usable JSON"),
                               ("method", "M" * 1_000_000, "unknown CRI method")):
        rec = dict(base, **{field: value})
        if field == "code":
            rec = dict(base, direction="reply")
            lines = [json.dumps(base), json.dumps(dict(rec, code=value))]
        else:
            lines = [json.dumps(rec).replace('"BIG"', "9" * 5000)]
        _check(*run(capsys, "-shape", "4c", "-dump", files(f"d-{field}.jsonl", "\n".join(lines) + "\n")), says)


# -- size limits of the files themselves -------------------------------------------------------------------


def test_files_larger_than_the_limit_are_refused_before_they_are_read(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(POD * 100)
    with pytest.raises(WorkloadError, match=r"pods file .*big.yaml: larger than 0 MiB"):
        read_text(str(big), "pods file", limit=1000)
    assert read_text(str(big), "pods file") == POD * 100
    lines = tmp_path / "d.jsonl"
    lines.write_text("{}\n" + "x" * 5000 + "\n{}\n")
    got = read_lines(str(lines), "dump", limit=1000)
    assert next(got) == "{}\n"
    with pytest.raises(WorkloadError, match=r"dump .*d.jsonl:2: a line longer than"):
        next(got)
    with pytest.raises(WorkloadError, match="cannot read dump .*: Is a directory"):
        next(read_lines(str(tmp_path), "dump"))


def test_the_error_line_is_clipped_whatever_a_message_quotes(capsys, files):
    # topology/load.py quotes the bad value whole; the command's line is clipped all the same.
    doc = {"cpus": [{"id": 0, "node": 0, "siblings": "0", "kind": "k" * 1_000_000}], "nodes": []}
    code, out, err = run(capsys, "-topology", files("t.json", json.dumps(doc)), "-churn", "4")
    _check(code, out, err, "t.json: cpus[0].kind", "characters)")


def test_a_good_input_still_runs(capsys, files):
    code, out, err = run(capsys, "-shape", "4c", "-pods", files("p.yaml", POD), "-brief")
    assert code == 0 and not err and "1 pod from" in out
    assert Path(files("q.yaml", POD)).exists()
