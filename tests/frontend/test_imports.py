"""The relay and the NRI plugin are sibling front ends over one shared wiring (frontend/):
the plugin's process loads none of the relay's CRI transports (issue 25, item 2: it used to
load the relay's command line, app.py, both transports and `upstream`, 19 transport modules)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The relay's own: its front end, its two transports and its runtime channel.
RELAY_ONLY = ("cri_resmgr.relay", "cri_resmgr.transport.framerelay", "cri_resmgr.transport.grpcrelay",
              "cri_resmgr.transport.upstream")


def _loaded(*modules: str) -> list[str]:
    """The modules a fresh interpreter holds after importing `modules`."""
    code = "import importlib, json, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n" \
           "print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=120,
                          cwd=REPO, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout)
    return names


def _relay_only(loaded: list[str]) -> list[str]:
    return [m for m in loaded if any(m == p or m.startswith(p + ".") for p in RELAY_ONLY)]


def test_the_nri_plugin_loads_no_cri_transport() -> None:
    loaded = _loaded("cri_resmgr.nri.cli", "cri_resmgr.nri.app")
    assert _relay_only(loaded) == []
    # Of the transport layer it uses the contract's types (metrics), the method table (the
    # dumper decodes by it), socket hygiene (the Config service) and the call statistics'
    # types the contract names: nothing that relays a call.
    assert [m for m in loaded if m.startswith("cri_resmgr.transport.")] == [
        "cri_resmgr.transport.callstats", "cri_resmgr.transport.contract", "cri_resmgr.transport.methods",
        "cri_resmgr.transport.sockets"]
    assert "cri_resmgr.frontend.services" in loaded and "cri_resmgr.frontend.commandline" in loaded


def test_the_relay_loads_them_so_the_check_can_fail() -> None:
    loaded = _loaded("cri_resmgr.cli")
    assert {"cri_resmgr.relay.app", "cri_resmgr.transport.framerelay.relay", "cri_resmgr.transport.grpcrelay",
            "cri_resmgr.transport.upstream"} <= set(loaded)
    # The relay's process holds nothing of the plugin's either.
    assert not [m for m in loaded if m.startswith("cri_resmgr.nri")]
