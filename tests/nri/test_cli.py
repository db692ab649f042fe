"""`cri-resmgr-nri`'s command line: help, version, and usage errors naming the bad value."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cri_resmgr import __version__
from cri_resmgr.nri.plugin import check_name


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("NRI_")} | (env or {})
    return subprocess.run([sys.executable, "-m", "cri_resmgr.nri.cli", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env=full)


def test_help_names_the_nri_flags_and_the_relays_engine_flags() -> None:
    done = run("-help")
    assert done.returncode == 0
    for flag in ("-nri-socket", "-nri-plugin-name", "-nri-plugin-index", "-policy", "-state-dir", "-force-config",
                 "-metrics-address", "-dump"):
        assert flag in done.stdout
    assert "-relay-socket" not in done.stdout


def test_version() -> None:
    done = run("-version")
    assert done.returncode == 0 and __version__ in done.stdout + done.stderr


def test_usage_errors_name_the_bad_value() -> None:
    for args, message in ((("-nri-plugin-index", "100"), "-nri-plugin-index: plugin index '100'"),
                          (("-policy", "nope"), "unknown policy 'nope'"),
                          (("-dump", "loud:.*"), "loud"),
                          (("-force-config", "/nonexistent.yaml"), "cannot read /nonexistent.yaml"),
                          (("-nri-plugin-name", "cri resmgr"), "-nri-plugin-name: plugin name 'cri resmgr'")):
        done = run(*args)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr



def test_plugin_names_follow_nris_rule() -> None:
    """containerd/nri's CheckPluginName: not empty, only [a-zA-Z0-9_.+-]."""
    for good in ("cri-resmgr", "a", "Plugin_1.2+x"):
        assert check_name(good) == good
    for bad, said in (("", "empty"), ("cri resmgr", "' '"), ("cri/resmgr", "'/'"), ("résumé", "'é'")):
        with pytest.raises(ValueError, match=said):
            check_name(bad)
