"""-version on the three commands: the package's one version (setup.cfg reads cri_resmgr.__version__)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from setuptools.config.setupcfg import read_configuration

from cri_resmgr import __version__, flags

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMMANDS = ("cri-resmgr", "cri-resmgr-agent", "cri-resmgr-webhook")


def test_setup_cfg_takes_the_package_version():
    assert read_configuration(str(REPO / "setup.cfg"))["metadata"]["version"] == __version__


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("spelling", ["-version", "--version"])
def test_version(command, spelling):
    # No NODE_NAME for the agent, no certificate for the webhook: -version needs neither.
    shown = subprocess.run([str(BIN / command), spelling], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin"})
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout.startswith(f"{command} {__version__} (commit "), shown.stdout
    assert shown.stdout.endswith(f", Python {platform.python_version()})\n"), shown.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_version(command):
    shown = subprocess.run([str(BIN / command), "-help"], capture_output=True, text=True, timeout=60)
    assert "-version, --version" in shown.stdout


def test_a_command_without_a_version_has_no_such_flag():
    command = flags.Command("x", "", ())
    with pytest.raises(flags.UsageError, match="no such option: -version"):
        command.parse(["-version"])
    assert flags.Command("x", "", (), version="1.2").run(["--version"], lambda _v: 1) == 0
