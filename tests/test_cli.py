"""The cri-resmgr command line as a user meets it: the installed console script."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from cri_resmgr.config.options import OptionFileError, expand_config, read_option_file


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    exe = shutil.which("cri-resmgr") or sys.executable
    cmd = [exe, *args] if exe != sys.executable else [exe, "-m", "cri_resmgr.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args,message", [
    (["-bogus"], "no such option: -bogus"),
    (["--bogus=1"], "no such option: --bogus"),
    (["-policy", "nope"], "unknown policy 'nope'"),
    (["-policy"], "-policy"),
    (["-dump", "full:["], "invalid regular expression '['"),
    (["-dump", "loud:.*"], "loud"),
    (["-dump-format", "xml"], "xml"),
    (["-config", "/nonexistent/opts"], "cannot read option file /nonexistent/opts"),
    (["-force-config", "/nonexistent/cfg.yaml"], "cannot read /nonexistent/cfg.yaml"),
    (["-runtime-socket", "-", "-image-socket", "-"], "nothing to relay"),
    (["-relay-socket", "/tmp/x.sock", "-runtime-socket", "unix:///tmp/x.sock"], "same path"),
    (["-relay-transport", "quic"], "quic"),
    (["-relay-transport", "h2", "-runtime-socket", "/tmp/a.sock", "-image-socket", "/tmp/b.sock"],
     "-relay-transport h2 relays to one socket"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = run(*args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("cri-resmgr: error: ")
    assert message in lines[0]


def test_bad_config_file_names_the_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policy:\n  Active: static\n  ReservedResources: {CPUS: 1}\n")
    r = run("-force-config", str(cfg), "-print-config")
    assert r.returncode == 2
    assert "policy.ReservedResources.CPUS: unknown key" in r.stderr
    cfg.write_text("policy: [unclosed\n")
    r = run("-force-config", str(cfg), "-print-config")
    assert r.returncode == 2 and "invalid YAML" in r.stderr and "line" in r.stderr


def test_help_and_list_policies():
    r = run("-h")
    assert r.returncode == 0 and "-relay-socket" in r.stdout and "-dump" in r.stdout
    r = run("-list-policies")
    assert r.returncode == 0
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == ["none", "static", "static-plus", "topology-aware", "balloons"]
    assert "alias: null" in r.stdout


def test_print_config_shows_the_seed_example(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policy: {Active: static, ReservedResources: {CPU: 1}}\n")
    r = run("-force-config", str(cfg), "-print-config")
    assert r.returncode == 0, r.stderr
    assert f"source: {cfg}" in r.stdout
    assert "Active: static" in r.stdout and "CPU: 1" in r.stdout


def test_option_file_provides_flags_and_command_line_wins(tmp_path):
    opts = tmp_path / "opts"
    opts.write_text("# comment\npolicy static\n\ndump=name:.*\nlogger-debug\n")
    assert read_option_file(str(opts)) == ["-policy", "static", "-dump", "name:.*", "-logger-debug"]
    assert expand_config(["-policy", "none", "-config", str(opts)]) == [
        "-policy", "static", "-dump", "name:.*", "-logger-debug", "-policy", "none"]
    r = run("-config", str(opts), "-policy", "none", "-print-config")
    assert r.returncode == 0, r.stderr
    assert "Active: none" in r.stdout


def test_option_file_errors(tmp_path):
    opts = tmp_path / "opts"
    opts.write_text("policy static\n!!! what\n")
    with pytest.raises(OptionFileError, match=r"opts:2: cannot parse '!!! what'"):
        read_option_file(str(opts))
    opts.write_text("config other\n")
    with pytest.raises(OptionFileError, match="cannot include another"):
        read_option_file(str(opts))
    r = run("-config", str(opts))
    assert r.returncode == 2 and "cannot include another" in r.stderr


def test_unknown_flag_in_option_file_names_the_file_and_line(tmp_path):
    opts = tmp_path / "opts"
    opts.write_text("policy static\n# typo below\npolcy static\n")
    r = run("-config", str(opts))
    assert r.returncode == 2 and f"{opts}:3: no such option: polcy" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["-runtime-wait-timeout", "-1"], "invalid value for -runtime-wait-timeout: -1 is less than 0, the least it may be"),
    (["-reconcile-period", "-5"], "invalid value for -reconcile-period"),
    (["-dump-max-size", "0"], "invalid value for -dump-max-size"),
    (["-logger-debug", "policy,nosuch"], "unknown log source nosuch"),
    (["-metrics-address", "8891"], "expected HOST:PORT (or :PORT)"),
])
def test_bad_new_flag_values(args, message):
    r = run(*args, "-print-config")
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_print_config_checks_this_nodes_hardware_and_shows_the_flags(tmp_path):
    from cri_resmgr.topology import discover
    online = discover("/").online
    cfg = tmp_path / "c.yaml"
    cfg.write_text("policy: {Active: static, ReservedResources: {CPU: \"cpuset:4095\"}}\n")
    r = run("-force-config", str(cfg), "-print-config")
    assert r.returncode == 2 and "policy.ReservedResources" in r.stderr and "4095" in r.stderr, r.stderr
    cfg.write_text("policy: {Active: static, ReservedResources: {CPU: 1}}\n")
    r = run("-force-config", str(cfg), "-print-config", "-dump", "name:.*", "-dump-file", "/tmp/d",
            "-dump-max-size", "1000", "-logger-debug", "policy,cache")
    assert r.returncode == 0, r.stderr
    assert f"CPUs online {online}" in r.stdout
    assert "Config: name:.*" in r.stdout and "File: /tmp/d" in r.stdout and "MaxSize: 1000" in r.stdout
    assert "DebugSources:\n  - cache\n  - policy" in r.stdout


def test_logger_debug_takes_sources_star_or_nothing():
    from cri_resmgr.frontend import logsetup
    assert logsetup.parse_sources("policy, cache,relay") == {"policy", "cache", "relay"}
    assert logsetup.parse_sources("*") == {"*"}
    # A bare -logger-debug (the old switch, on a command line or an option file line) means '*'.
    assert logsetup.debug_flag_value(["-logger-debug"], "logger-debug") == ["-logger-debug=*"]
    assert logsetup.debug_flag_value(["-logger-debug", "-dry-run"], "logger-debug") == [
        "-logger-debug=*", "-dry-run"]
    assert logsetup.debug_flag_value(["--logger-debug", "policy"], "logger-debug") == [
        "--logger-debug", "policy"]


def test_debug_sources_turn_on_ours_not_grpcs_or_asyncios():
    import logging

    from cri_resmgr.frontend import logsetup
    touched = ["cri_resmgr", "cri_resmgr.policy", "cri_resmgr.engine.cache", "cri_resmgr.engine.adopt"]
    try:
        debug = logsetup.DebugSources(logsetup.parse_sources("policy,cache"))
        assert logging.getLogger("cri_resmgr.policy.static").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("cri_resmgr.engine.cache").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("cri_resmgr.transport.framerelay").isEnabledFor(logging.DEBUG)
        debug.set_config_debug(True)  # logger.Debug: true in the configuration: all of ours
        assert logging.getLogger("cri_resmgr.transport.framerelay").isEnabledFor(logging.DEBUG)
        debug.set_config_debug(False)  # and back to the command line's sources
        assert not logging.getLogger("cri_resmgr.transport.framerelay").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("cri_resmgr.policy").isEnabledFor(logging.DEBUG)
        logsetup.DebugSources(logsetup.parse_sources("*"))
        assert logging.getLogger("cri_resmgr.dump").isEnabledFor(logging.DEBUG)
        for other in ("grpc", "asyncio"):
            assert logging.getLogger(other).getEffectiveLevel() == logging.getLogger().getEffectiveLevel()
    finally:
        for name in touched:
            logging.getLogger(name).setLevel(logging.NOTSET)


def test_runtime_wait_timeout_fails_clearly(tmp_path):
    r = run("-policy", "null", "-relay-socket", str(tmp_path / "r.sock"),
            "-runtime-socket", str(tmp_path / "missing.sock"), "-config-socket", "-",
            "-state-dir", str(tmp_path / "state"), "-runtime-wait-timeout", "1")
    assert r.returncode == 1
    assert f"runtime at {tmp_path / 'missing.sock'} not ready after 1s" in r.stderr


@pytest.mark.parametrize("transport,image,expected", [
    ("auto", None, "FrameRelay"),
    ("auto", "-", "FrameRelay"),
    ("auto", "/tmp/img.sock", "GrpcRelay"),
    ("grpc", None, "GrpcRelay"),
    ("h2", "-", "FrameRelay"),
])
def test_transport_choice(transport, image, expected):
    from cri_resmgr.config import Settings
    from cri_resmgr.relay import app
    from cri_resmgr.transport.methods import MethodTable

    class FakeUpstream:  # make_relay reads only .path
        def __init__(self, path):
            self.path = path

    runtime = FakeUpstream("/tmp/rt.sock")
    image_up = runtime if image is None else (None if image == "-" else FakeUpstream(image))
    settings = Settings(relay_socket="/tmp/relay.sock", runtime_socket=runtime.path,
                        image_socket=image or runtime.path, relay_transport=transport)
    app.validate(settings)
    relay = app.make_relay(settings, runtime, image_up, MethodTable(), runtime)
    assert type(relay).__name__ == expected
