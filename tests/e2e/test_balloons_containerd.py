"""The balloons policy through the real relay process against the real containerd, checked
in the real cgroup files and /proc/PID/status, across kill -9 of the relay.

Two balloon types on the machine's 2 CPUs: `alpha` picked by namespace, lending its
idle CPU to its containers; `beta` picked by the pod annotation only. Beta inflating
takes the CPU alpha's containers were running on as a lent idle CPU; when beta's
container leaves, its balloon goes and alpha inflates onto that CPU.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from cri_resmgr.topology import discover
from cri_resmgr.topology.cpuset import CPUSet
from tests.e2e.test_policy_containerd import wait_cpuset, wait_state
from tests.harness.kubelet import Kubelet
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.harness.relayproc import RelayProcess

ONLINE = discover("/").online
pytestmark = pytest.mark.skipif(len(ONLINE) != 2, reason="the scenario is written for the 2-CPU machines")
ANNOTATION = "balloon.balloons.cri-resource-manager.intel.com"

CONFIG = """\
policy:
  Active: balloons
  balloons:
    BalloonTypes:
      - Name: alpha
        Namespaces: [alpha]
        MaxBalloons: 1
        ShareIdleCPUsInSame: system
      - Name: beta
        MaxBalloons: 1
        MaxCPUs: 1
"""


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="crirm-bl-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def pod(name: str, cpu: str, namespace: str = "default", balloon: str | None = None) -> PodSpec:
    annotations = {ANNOTATION: balloon} if balloon else {}
    return PodSpec(name=name, namespace=namespace, annotations=annotations,
                   containers=[ContainerSpec(name="c", requests={"cpu": cpu, "memory": "16Mi"})])


def balloons_of(state: dict) -> dict[str, str]:
    """container key -> balloon name, from the state file."""
    return {k: v["details"]["balloon"] for k, v in state["assignments"].items()}


def test_two_balloon_types_share_the_two_cpus_across_kill9(containerd, cgroup_root, workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text(CONFIG)
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        # Alpha (by namespace) gets one CPU of its own and borrows the idle other one.
        a = k.start_pod(pod("a", "500m", namespace="alpha"))
        ca = a.container_ids["c"]
        wait_cpuset(k, ca, str(ONLINE))
        state = wait_state(relay, lambda s: len(s["assignments"]) == 1)
        assert list(balloons_of(state).values()) == ["alpha[0]"]
        alpha_cpu = CPUSet.parse(next(iter(state["assignments"].values()))["details"]["cpus"])
        assert len(alpha_cpu) == 1
        other = ONLINE - alpha_cpu

        # Beta (by annotation, in the default namespace) inflates onto the idle CPU:
        # alpha's container loses the lent CPU, in its real cgroup.
        b = k.start_pod(pod("b", "500m", balloon="beta"))
        cb = b.container_ids["c"]
        wait_cpuset(k, cb, str(other))
        wait_cpuset(k, ca, str(alpha_cpu))
        state = wait_state(relay, lambda s: sorted(balloons_of(s).values()) == ["alpha[0]", "beta[0]"])

        relay.kill()  # kill -9 between steps
        relay.start()
        # Restored from the state file: nothing moves.
        wait_cpuset(k, cb, str(other))
        wait_cpuset(k, ca, str(alpha_cpu))

        # A second alpha container: alpha wants 2 CPUs but beta holds the other one;
        # it is placed best-effort (a warning, never a failed call).
        a2 = k.start_pod(pod("a2", "1000m", namespace="alpha"))
        ca2 = a2.container_ids["c"]
        wait_cpuset(k, ca2, str(alpha_cpu))
        assert "no alpha balloon can hold" in relay.log()

        relay.kill()
        relay.start()
        # Beta's container goes: its balloon is removed and alpha inflates onto its CPU;
        # both alpha members follow.
        k.delete_pod(b)
        wait_cpuset(k, ca, str(ONLINE))
        wait_cpuset(k, ca2, str(ONLINE))
        state = wait_state(relay, lambda s: set(balloons_of(s).values()) == {"alpha[0]"}
                           and CPUSet.parse(next(iter(s["assignments"].values()))["details"]["cpus"]) == ONLINE)
        log = relay.log()
        assert "alpha[0] CPUs" in log and "beta[0] CPUs" in log  # which balloon each went to

        k.delete_pod(a2)
        wait_cpuset(k, ca, str(ONLINE))  # alpha deflates to one CPU and borrows the other again
        state = wait_state(relay, lambda s: len(s["assignments"]) == 1)
        assert len(CPUSet.parse(next(iter(state["assignments"].values()))["details"]["cpus"])) == 1
        k.delete_pod(a)
        wait_state(relay, lambda s: s["assignments"] == {})
        assert json.loads((Path(relay.state_dir) / "state.json").read_text())["policy"] == "balloons"
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


def test_bad_balloons_configuration_is_refused_with_the_key(containerd, workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n"
                   "      - Name: x\n        MinCPUs: 3\n        MaxCPUs: 1\n")
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)])
    with pytest.raises(RuntimeError) as e:
        relay.start(timeout=20)
    assert "policy.balloons.BalloonTypes[0].MaxCPUs" in str(e.value)


def _types(alpha_min: int) -> str:
    return ("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n"
            f"      - Name: alpha\n        Namespaces: [alpha]\n        MaxBalloons: 1\n        MinCPUs: {alpha_min}\n"
            "      - Name: beta\n        MaxBalloons: 1\n")


def _reload(relay: RelayProcess, cfg: Path, text: str, marker: str) -> None:
    """Rewrite the forced configuration, SIGHUP, and wait (bounded) for the log line."""
    import signal
    import time

    seen = relay.log().count(marker)
    cfg.write_text(text)
    relay.signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while relay.log().count(marker) == seen:
        if time.monotonic() > deadline:
            pytest.fail(f"no {marker!r} after SIGHUP:\n{relay.log()[-3000:]}")
        time.sleep(0.1)


def test_live_reconfiguration_resizes_real_cpusets_or_is_refused(containerd, cgroup_root, workdir):
    cfg = workdir / "config.yaml"
    cfg.write_text(_types(0))
    relay = RelayProcess(workdir, str(containerd.socket), ["-force-config", str(cfg)]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        a = k.start_pod(pod("a", "500m", namespace="alpha"))
        ca = a.container_ids["c"]
        state = wait_state(relay, lambda s: len(s["assignments"]) == 1)
        alpha_cpu = next(iter(state["assignments"].values()))["details"]["cpus"]
        wait_cpuset(k, ca, alpha_cpu)
        b = k.start_pod(pod("b", "500m", balloon="beta"))
        cb = b.container_ids["c"]
        wait_cpuset(k, cb, str(ONLINE - CPUSet.parse(alpha_cpu)))

        # alpha MinCPUs 2 cannot fit while beta holds the other CPU: refused, nothing moves.
        _reload(relay, cfg, _types(2), "SIGHUP: keeping the current configuration")
        assert "the running containers do not fit" in relay.log()
        wait_cpuset(k, ca, alpha_cpu)
        wait_cpuset(k, cb, str(ONLINE - CPUSet.parse(alpha_cpu)))

        k.delete_pod(b)
        # Now it fits: alpha inflates live to both CPUs and the real cpuset follows.
        _reload(relay, cfg, _types(2), "SIGHUP: reloaded")
        wait_cpuset(k, ca, str(ONLINE))
        wait_state(relay, lambda s: next(iter(s["assignments"].values()))["details"]["cpus"] == str(ONLINE))
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()


def test_status_and_metrics_show_the_balloons(containerd, cgroup_root, workdir):
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from tests.e2e.test_status_containerd import _free_port, _matches_cgroups, _status

    cfg = workdir / "config.yaml"
    cfg.write_text(CONFIG)
    port = _free_port()
    relay = RelayProcess(workdir, str(containerd.socket),
                         ["-force-config", str(cfg), "-metrics-address", f"127.0.0.1:{port}"]).start()
    k = Kubelet(relay.address, cgroup_root=f"{cgroup_root}/kubepods")
    try:
        k.start_pod(pod("a", "500m", namespace="alpha"))
        k.start_pod(pod("b", "250m", balloon="beta"))
        deadline = time.monotonic() + 20
        while True:  # the lent CPU is taken back by an update after the create
            doc = json.loads(_status(port, "-o", "json"))
            if not _matches_cgroups(k, doc) and len(doc["containers"]) == 2:
                break
            assert time.monotonic() < deadline, _matches_cgroups(k, doc)
            time.sleep(0.2)
        table = {p["name"]: p for p in doc["pool_table"]}
        assert (table["alpha[0]"]["kind"], table["alpha[0]"]["containers"], table["alpha[0]"]["requested_milli"]) \
            == ("alpha", 1, 500)
        assert (table["beta[0]"]["kind"], table["beta[0]"]["requested_milli"]) == ("beta", 250)
        assert {c["pool"] for c in doc["containers"]} == {"alpha[0]", "beta[0]"}
        text = _status(port)
        assert f"CPU {CPUSet.parse(table['beta[0]']['cpus']).min()} beta[0]" in text
        assert any(line.split()[:2] == ["alpha[0]", "alpha"] for line in text.splitlines())
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(metrics)}
        kinds = {s.labels["pool"]: s.labels["kind"] for s in fams["cri_resmgr_pool_info"].samples}
        assert kinds["alpha[0]"] == "alpha" and kinds["beta[0]"] == "beta"
        requested = {s.labels["pool"]: s.value for s in fams["cri_resmgr_pool_requested_cpus"].samples}
        assert requested["alpha[0]"] == 0.5 and requested["beta[0]"] == 0.25
        cpus = {s.labels["pool"]: s.value for s in fams["cri_resmgr_pool_cpus"].samples}
        assert cpus["alpha[0]"] == 1 and cpus["beta[0]"] == 1
    finally:
        k.delete_all_pods()
        k.close()
        relay.stop()
