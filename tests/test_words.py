"""What the commands say, read as an operator reads it (issue 38): counts agree with their
nouns, one usage line, each default once, `ready` alone, a bound said plainly, a misspelled
command or configuration key gets a guess as a misspelled flag does, an unreadable file says
why, and the dump does not repeat on stderr what the log says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cri_resmgr import flags
from cri_resmgr.config import ConfigError
from cri_resmgr.config.schema import parse_document
from cri_resmgr.dump.dumper import Dumper
from cri_resmgr.policy.registry import default_registry


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cri_resmgr.cli", *args], capture_output=True, text=True,
                          timeout=60)


def test_a_lower_bound_is_said_plainly():
    with pytest.raises(ValueError, match=r"^-5 is less than 0, the least it may be$"):
        flags.number(low=0)("-5")
    with pytest.raises(ValueError, match=r"^70000 is not in the range 0-65535$"):
        flags.integer(0, 65535)("70000")
    done = run("-runtime-wait-timeout", "-5")
    assert done.stderr == "cri-resmgr: error: invalid value for -runtime-wait-timeout: -5 is less than 0, " \
        "the least it may be\n"


def test_counts_agree_with_their_nouns():
    assert (flags.plural(1, "package"), flags.plural(2, "package")) == ("1 package", "2 packages")
    done = run("simulate", "-shape", "1s/1n/2c/1t", "-print-machine")
    assert done.returncode == 0, done.stderr
    assert "Machine: 2 online CPUs (0-1), 2 cores, 1 package, 1 NUMA node with CPUs" in done.stdout, done.stdout


def test_one_resize_is_a_resize(tmp_path):
    pods = tmp_path / "pods.yaml"
    pods.write_text("- name: a\n  containers: [{name: c, resources: {requests: {cpu: 100m}}}]\n"
                    "- resize: {pod: a, container: c, resources: {requests: {cpu: 200m}}}\n")
    done = run("simulate", "-shape", "4c", "-pods", str(pods), "-policy", "static", "-brief")
    assert done.returncode == 0, done.stderr
    assert f"Workload: 1 pod and 1 resize from {pods}" in done.stdout, done.stdout


def test_probe_says_ready_once():
    assert flags.probe_line(True, "ready") == "ready"
    assert flags.probe_line(True, "ready (dry run)") == "ready: ready (dry run)"
    assert flags.probe_line(False, "starting: waiting for the runtime") == "not ready: starting: waiting for the runtime"


def test_help_has_one_usage_line_and_each_default_once():
    helped = run("-help").stdout
    assert [line for line in helped.splitlines() if line.startswith("usage:")] == [
        "usage: cri-resmgr [flags], or: cri-resmgr COMMAND [flags] (each command has -help)"]
    simulate_help = run("simulate", "-help").stdout
    resizes = simulate_help.split("-resizes, --resizes", 1)[1].split("\n  -", 1)[0]
    assert resizes.count("default") == 1, resizes


def test_a_misspelled_command_gets_a_guess():
    done = run("simulat", "-shape", "4c")
    assert (done.returncode, done.stderr) == (2, "cri-resmgr: error: no such command: simulat (did you mean simulate?)\n")
    done = run("frobnicate")
    assert (done.returncode, done.stderr) == (
        2, "cri-resmgr: error: no such command: frobnicate (commands: topology, status, simulate, replay, help)\n")


def test_a_misspelled_configuration_key_gets_a_guess():
    with pytest.raises(ConfigError, match=r"policy\.Activ: unknown key \(did you mean Active\? known: "):
        parse_document("policy: {Activ: static}\n", "f", default_registry().names())


def test_an_unreadable_configuration_file_says_why(tmp_path):
    done = run("-force-config", str(tmp_path / "missing.yaml"), "-print-config")
    assert done.returncode == 2
    assert done.stderr == f"cri-resmgr: error: invalid value for -force-config: cannot read " \
        f"{tmp_path / 'missing.yaml'}: No such file or directory\n"
    done = run("-fallback-config", str(tmp_path), "-print-config")
    assert done.stderr.endswith(f"cannot read {tmp_path}: Is a directory\n"), done.stderr


def test_a_dump_on_stderr_leaves_the_notes_to_the_log(capsys, tmp_path):
    beside_the_log = Dumper(["full:.*"])
    beside_the_log.note("dry-run: would set default/a:c: cpuset 1 mems 0")
    beside_the_log.close()
    assert "would set" not in capsys.readouterr().err
    to_a_file = Dumper(["full:.*"], file=str(tmp_path / "dump"))
    to_a_file.note("dry-run: would set default/a:c: cpuset 1 mems 0")
    to_a_file.close()
    assert "would set default/a:c" in (tmp_path / "dump").read_text()


def test_only_containerd_1_is_said_to_have_nri_before_v07():
    from cri_resmgr.nri.app import _nri_before_v07

    assert _nri_before_v07("containerd", "v1.7.24") and _nri_before_v07("containerd", "1.7.24")
    assert not _nri_before_v07("containerd", "v2.1.9")
    assert not _nri_before_v07("cri-o", "1.30.0")
