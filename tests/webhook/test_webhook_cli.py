"""The real program: flags in both spellings, errors that name the bad
input with exit 2, and a clean stop on SIGTERM."""
from __future__ import annotations

import json
import re
import signal
import socket
import ssl
import subprocess
import sys

import pytest

PROG = [sys.executable, "-m", "cri_resmgr_webhook"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PROG, *args], capture_output=True, text=True, timeout=60)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cri-resmgr-webhook: error: ")
    return lines[0]


@pytest.mark.parametrize("args,expected", [
    (["-bogus"], "no such option: -bogus"),
    (["--cert-file", "a", "--key-file", "b", "--nope=1"], "no such option: --nope"),
    (["-key-file", "k"], "missing option: -cert-file"),
    (["-cert-file", "c", "-key-file", "k", "-port", "http"], "'http' is not a valid integer"),
    (["-cert-file", "c", "-key-file", "k", "-port", "70000"], "70000 is not in the range"),
    (["-cert-file", "c", "-key-file", "k", "-max-body-bytes", "0"], "0 is less than 1, the least it may be"),
    (["-cert-file", "c", "-key-file", "k", "extra"], "unexpected extra argument (extra)"),
])
def test_bad_flags(args, expected):
    assert expected in one_line_error(run(*args))


def test_missing_certificate_named(pki, tmp_path):
    missing = tmp_path / "nope.crt"
    line = one_line_error(run("-cert-file", str(missing), "-key-file", str(pki.key)))
    assert f"cannot read certificate file {missing}: No such file or directory" in line


def test_missing_key_named(pki, tmp_path):
    missing = tmp_path / "nope.key"
    line = one_line_error(run("--cert-file", str(pki.cert), "--key-file", str(missing)))
    assert f"cannot read key file {missing}" in line


def test_garbage_certificate_named(pki, tmp_path):
    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate\n")
    line = one_line_error(run("-cert-file", str(bad), "-key-file", str(pki.key)))
    assert f"certificate file {bad} holds no PEM certificate" in line


def test_key_given_as_certificate_named(pki):
    line = one_line_error(run("-cert-file", str(pki.key), "-key-file", str(pki.key)))
    assert f"certificate file {pki.key} holds no PEM certificate" in line


def test_garbage_key_named(pki, tmp_path):
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    line = one_line_error(run("-cert-file", str(pki.cert), "-key-file", str(bad)))
    assert f"key file {bad} holds no usable PEM private key" in line


def test_key_of_another_certificate_named(pki):
    # The CA's key is a valid key, just not the serving certificate's.
    line = one_line_error(run("-cert-file", str(pki.cert), "-key-file", str(pki.ca_key)))
    assert f"key file {pki.ca_key} does not match certificate file {pki.cert}" in line


def test_encrypted_key_refused_without_prompting(pki, tmp_path):
    encrypted = tmp_path / "enc.key"
    subprocess.run(["openssl", "pkey", "-in", str(pki.key), "-aes256", "-passout", "pass:secret",
                    "-out", str(encrypted)], check=True, capture_output=True)
    result = subprocess.run([*PROG, "-cert-file", str(pki.cert), "-key-file", str(encrypted)],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert f"key file {encrypted} is encrypted" in one_line_error(result)


def test_help_exits_zero():
    result = run("-help")
    assert result.returncode == 0
    assert "-cert-file, --cert-file" in result.stdout


def test_port_in_use_named(pki):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("-cert-file", str(pki.cert), "-key-file", str(pki.key),
                     "-bind-address", "127.0.0.1", "-port", str(port))
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in result.stderr


def start(*args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([*PROG, *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"listening on https://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        proc.wait()
        pytest.fail(f"webhook did not start: {line}{proc.stderr.read()}")
    return proc, int(match.group(1))


@pytest.mark.parametrize("style", ["go", "gnu"])
def test_serves_then_stops_cleanly_on_sigterm(pki, support, style):
    if style == "go":
        args = ["-cert-file", str(pki.cert), "-key-file", str(pki.key), "-port", "0", "-bind-address", "127.0.0.1"]
    else:
        args = [f"--cert-file={pki.cert}", f"--key-file={pki.key}", "--port=0", "--bind-address=127.0.0.1"]
    proc, port = start(*args)
    try:
        conn = support.ServiceConnection(port, ssl.create_default_context(cafile=str(pki.ca_cert)))
        body = json.dumps(support.admission_review(support.pod(containers=[
            support.container("c", requests={"cpu": "1"})]))).encode()
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["response"]["patchType"] == "JSONPatch"
        # The connection stays open and idle: the stop must not wait for it.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = proc.stderr.read()
    assert "review 0d6b3c4e-7f0a-4d43-9c1e-2f5b2ab1c001 default/web: patched" in log
    assert "SIGTERM received: stopping" in log
    assert "still in flight" not in log
    assert log.rstrip().endswith("stopped")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_format_as_the_relays(pki, fmt):
    """-log-format as the relay's (issue 29): the same fields, times with their zone."""
    proc = subprocess.Popen([*PROG, "-cert-file", str(pki.cert), "-key-file", str(pki.key), "-port", "0",
                             "-bind-address", "127.0.0.1", "-log-format", fmt],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, first + rest
    lines = (first + rest).splitlines()
    zoned = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d"
    if fmt == "text":
        assert re.fullmatch(zoned + r" INFO cri_resmgr_webhook: listening on https://127\.0\.0\.1:\d+", lines[0])
        return
    records = [json.loads(line) for line in lines]
    assert all(set(r) == {"time", "level", "logger", "message"} and re.fullmatch(zoned, r["time"])
               for r in records), records
    assert records[0]["message"].startswith("listening on https://127.0.0.1:")
    assert [r["message"] for r in records[1:]] == ["SIGTERM received: stopping", "stopped"]
