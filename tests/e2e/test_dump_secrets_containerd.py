"""Secrets in a full dump of a real containerd's replies (issue 38): a pod with secret env
vars, annotations and command-line flags, asked for its verbose status, through the relay;
the secret values must be nowhere in the dump's bytes, in either format, on 1.6 and 2.x,
while the verbose info stays JSON and keeps what is not secret."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import runtimes
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

SECRETS = {
    "env": "tok-env-8f3a1c",
    "pod annotation": "tok-podann-51d0e2",
    "container annotation": "tok-ctrann-77b9a4",
    "flag=": "tok-flageq-2c6e90",
    "flag value": "tok-flagsp-93ad17",
}


@pytest.fixture
def relay_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="crirm-ds-", dir="/tmp"))  # short: unix socket paths
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _dump(runtime, relay_dir: Path, fmt: str) -> tuple[bytes, dict[str, str], dict[str, str]]:
    """The dump file's bytes, and the verbose info the test itself got (unmasked)."""
    dump = relay_dir / "cri.dump"
    r = RelayProcess(relay_dir, str(runtime.socket), ["-policy", "null", "-dump", "reset,full:.*",
                                                      "-dump-file", str(dump), "-dump-format", fmt]).start()
    try:
        with Kubelet(r.address, cgroup_root=f"{runtime.owned_cgroup_roots[0]}/kubepods") as k:
            app = ContainerSpec(
                name="app", env={"API_TOKEN": SECRETS["env"], "PLAIN": "visible-env"},
                annotations={"example.com/api-token": SECRETS["container annotation"]},
                command=["/bin/sh", "-c", 'trap "exit 0" TERM; while :; do sleep 1; done', "sh",
                         f"--api-token={SECRETS['flag=']}", "--session-key", SECRETS["flag value"],
                         "--plain", "visible-arg"])
            pod = PodSpec(name="secretive", containers=[app],
                          annotations={"example.com/auth-secret": SECRETS["pod annotation"]})
            h = k.start_pod(pod)
            container_info = dict(k.container_status(h.container_ids["app"], verbose=True).info)
            sandbox_info = dict(k.pod_status(h.sandbox_id, verbose=True).info)
            k.delete_pod(h)
    finally:
        assert r.stop() == 0
    return dump.read_bytes(), container_info, sandbox_info


BOTH = pytest.mark.parametrize("runtime", ["1.6", runtimes.CONTAINERD_2], indirect=True,
                               ids=["containerd-1.6", f"containerd-{runtimes.CONTAINERD_2}"])


@BOTH
@pytest.mark.parametrize("fmt", ["human", "jsonl"])
def test_no_secret_anywhere_in_a_full_dump_with_verbose_status(runtime, relay_dir, fmt):
    data, container_info, sandbox_info = _dump(runtime, relay_dir, fmt)
    # The runtime does carry them in its verbose info: the dump had them to mask.
    assert SECRETS["env"] in container_info["info"] and SECRETS["flag value"] in container_info["info"]
    assert SECRETS["pod annotation"] in sandbox_info["info"]
    for what, secret in SECRETS.items():
        assert secret.encode() not in data, f"the {what} secret is in the {fmt} dump"
    assert b"visible-env" in data and b"visible-arg" in data
    if fmt == "jsonl":
        replies = [json.loads(line) for line in data.decode().splitlines()]
        infos = [r["body"]["info"]["info"] for r in replies
                 if r.get("method") in ("ContainerStatus", "PodSandboxStatus") and r["direction"] == "reply"
                 and (r["body"] or {}).get("info")]
        assert len(infos) >= 2  # the harness asks a sandbox's too, for its cgroup parent
        for text in infos:
            assert isinstance(json.loads(text), dict)  # still JSON
        container = next(json.loads(t) for t in infos if "API_TOKEN" in t)
        assert set(container) == set(json.loads(container_info["info"]))
        assert "API_TOKEN=***redacted***" in container["runtimeSpec"]["process"]["env"]
        assert {"key": "API_TOKEN", "value": "***redacted***"} in container["config"]["envs"]
