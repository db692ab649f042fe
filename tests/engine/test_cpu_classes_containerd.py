"""CPU classes through the relay in front of the session's real containerd, on a host root
whose cpufreq, cpuidle and uncore files behave like the kernel's (tests/harness/cpufreq.py:
this machine has no cpufreq). The relay is the engine in this process (grpc transport,
the controller, the class writers) so that its host is the kernel-like tree; containerd,
runc and the containers are real. The generated tree has this machine's 2 CPUs, so the
cpusets the policy decides are ones containerd can give."""

from __future__ import annotations

import errno
import logging
import shutil
import tempfile
from pathlib import Path

import pytest

from cri_resmgr.config import ConfigError, EngineSettings, parse_document
from cri_resmgr.engine.controller import Controller
from cri_resmgr.engine.cri import TransportFeed
from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.relay.runtime import CriRuntime
from cri_resmgr.status import text, view
from cri_resmgr.transport.grpcrelay import GrpcRelay
from cri_resmgr.transport.methods import MethodTable
from cri_resmgr.transport.upstream import Upstream
from tests.harness import cpufreq, sysfs
from tests.harness.kubelet import Kubelet
from tests.harness.loop import LoopThread
from tests.harness.podspec import ContainerSpec, PodSpec

CONFIG = """
policy:
  Active: static
  ReservedResources: {CPU: 1}
  static:
    CPUClasses:
      - Name: turbo
        MinFreq: 3000000
        MaxFreq: 3500000
        FreqGovernor: performance
        EnergyPerformancePreference: performance
        UncoreMinFreq: 2000000
        UncoreMaxFreq: 2400000
        DisabledCstates: [C6]
      - Name: eco
        MinFreq: 800000
        MaxFreq: 1800000
        FreqGovernor: powersave
        EnergyPerformancePreference: power
    DefaultExclusiveCPUClass: turbo
    SharedPoolCPUClass: eco
"""
CPU = "sys/devices/system/cpu"
UNCORE = f"{CPU}/intel_uncore_frequency/package_00_die_00"


def _real_cpu_files() -> dict[str, str]:
    """This machine's own cpuidle (and any cpufreq) files: they must not change."""
    return cpufreq.files_under(Path("/"))


class Node:
    def __init__(self, containerd, cgroup_root: str, config: str = CONFIG, with_cpufreq: bool = True):
        self.dir = Path(tempfile.mkdtemp(prefix="crirm-cpucls-", dir="/tmp"))
        self.root = self.dir / "host"
        sysfs.generate(self.root, cores_per_die=2, threads_per_core=1)  # this machine's 2 CPUs
        if with_cpufreq:
            cpufreq.build(self.root, [0, 1])
        self.files = cpufreq.KernelLike(str(self.root))
        self.loop = LoopThread()
        settings = EngineSettings(state_dir=str(self.dir / "state"), host_root=str(self.root))
        self.sock = str(self.dir / "relay.sock")

        async def start():
            up = Upstream(str(containerd.socket))
            relay = GrpcRelay(self.sock, up, up, MethodTable())
            ctl = Controller(settings, default_registry(), TransportFeed(relay), CriRuntime(up), lambda *a: None,
                             host_files=self.files)
            await ctl.apply(parse_document(config, "test config", default_registry().names()))
            await relay.start()
            return relay, ctl

        self.relay, self.ctl = self.loop.run(start())
        self.kubelet = Kubelet("unix://" + self.sock, cgroup_root=f"{cgroup_root}/kubepods")

    def file(self, rel: str) -> str:
        return (self.root / rel).read_text().strip()

    def cpu(self, n: int) -> dict[str, str]:
        base = f"{CPU}/cpu{n}/cpufreq"
        out = {k: self.file(f"{base}/{k}") for k in ("scaling_min_freq", "scaling_max_freq", "scaling_governor",
                                                     "energy_performance_preference")}
        out["C6"] = self.file(f"{CPU}/cpu{n}/cpuidle/state3/disable")
        out["C1"] = self.file(f"{CPU}/cpu{n}/cpuidle/state1/disable")
        return out

    def apply(self, config: str) -> None:
        self.loop.run(self.ctl.apply(parse_document(config, "new config", default_registry().names())))

    def close(self) -> None:
        try:
            self.kubelet.delete_all_pods()
        finally:
            self.kubelet.close()
            self.loop.run(self.relay.stop(1))
            self.loop.run(self.ctl.close())
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def node_factory(containerd, cgroup_root):
    made = []

    def make(*args, **kw):
        n = Node(containerd, cgroup_root, *args, **kw)
        made.append(n)
        return n

    before = _real_cpu_files()
    yield make
    for n in made:
        n.close()
    assert _real_cpu_files() == before  # nothing on this host changed


def guaranteed(name: str, annotations: dict[str, str] | None = None) -> PodSpec:
    res = {"cpu": "1", "memory": "64Mi"}
    return PodSpec(name=name, annotations=annotations or {},
                   containers=[ContainerSpec(name="c", requests=res, limits=res)])


ECO = {"scaling_min_freq": "800000", "scaling_max_freq": "1800000", "scaling_governor": "powersave",
       "energy_performance_preference": "power", "C6": "0", "C1": "0"}
TURBO = {"scaling_min_freq": "3000000", "scaling_max_freq": "3500000", "scaling_governor": "performance",
         "energy_performance_preference": "performance", "C6": "1", "C1": "0"}


def test_a_guaranteed_containers_cpu_gets_its_class_and_the_pools_back(node_factory):
    n = node_factory()
    # Both CPUs are the shared pool's (static without StrictReservation shares the reserved one).
    assert n.cpu(0) == ECO and n.cpu(1) == ECO
    assert (n.file(f"{UNCORE}/min_freq_khz"), n.file(f"{UNCORE}/max_freq_khz")) == ("1200000", "2400000")

    start = len(n.files.writes)
    g = n.kubelet.start_pod(guaranteed("g"))
    cid = g.container_ids["c"]
    assert n.kubelet.container_status(cid).status.state == 1  # running
    assert n.kubelet.cgroup_files(cid).cpuset_cpus() == "1"  # the exclusive CPU
    assert n.cpu(1) == TURBO and n.cpu(0) == ECO
    # The die's uncore: the highest of its CPUs' classes (turbo's).
    assert (n.file(f"{UNCORE}/min_freq_khz"), n.file(f"{UNCORE}/max_freq_khz")) == ("2000000", "2400000")
    # Only the CPU whose class changed was written, and only its files whose value changed; the
    # maximum before the minimum that would pass the old one, the governor before the EPP it allows.
    assert [(rel.removeprefix(CPU + "/"), v) for rel, v in n.files.writes[start:]] == [
        ("cpu1/cpufreq/scaling_governor", "performance"), ("cpu1/cpufreq/scaling_max_freq", "3500000"),
        ("cpu1/cpufreq/scaling_min_freq", "3000000"), ("cpu1/cpufreq/energy_performance_preference", "performance"),
        ("cpu1/cpuidle/state3/disable", "1"), ("intel_uncore_frequency/package_00_die_00/min_freq_khz", "2000000")]
    state = n.ctl.state().to_document()
    assert state["cpu_classes"] == {"eco": "0", "turbo": "1"} and state["cpu_class_failures"] == []
    assert "CPU classes: eco 0, turbo 1" in text.render(view.build(state)).splitlines()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for m in EngineCollector(n.ctl).collect() for s in m.samples}
    assert samples[("cri_resmgr_cpu_class_cpus", (("class", "turbo"),))] == 1
    assert samples[("cri_resmgr_cpu_class_failures_total", ())] == 0

    n.kubelet.delete_pod(g)  # the CPU goes back to the shared pool, and gets its class
    assert n.cpu(1) == ECO
    assert (n.file(f"{UNCORE}/min_freq_khz"), n.file(f"{UNCORE}/max_freq_khz")) == ("1200000", "2400000")
    assert n.ctl.state().to_document()["cpu_classes"] == {"eco": "0-1"}


def test_without_cpufreq_one_warning_says_they_cannot_take_effect_and_nothing_is_written(node_factory, caplog):
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    n = node_factory(with_cpufreq=False)  # as this machine: no cpufreq, no uncore driver
    g = n.kubelet.start_pod(guaranteed("g"))
    assert n.kubelet.cgroup_files(g.container_ids["c"]).cpuset_cpus() == "1"
    n.apply(CONFIG + "\n")  # the same classes again: no second warning
    lines = [r.getMessage() for r in caplog.records if "CPU classes" in r.getMessage()]
    assert len(lines) == 1 and "which has no cpufreq" in lines[0] and "needed by turbo, eco" in lines[0] \
        and "intel_uncore_frequency" in lines[0], lines
    assert n.files.writes == []
    # Chosen and shown all the same: status says which CPUs have which class.
    assert n.ctl.state().to_document()["cpu_classes"] == {"eco": "0", "turbo": "1"}


def test_a_bad_class_on_a_reconfiguration_keeps_what_is_in_force(node_factory):
    n = node_factory()
    bad = CONFIG.replace("MaxFreq: 1800000", "MaxFreq: 9000000")
    with pytest.raises(ConfigError, match=r"new config: policy\.static\.CPUClasses\[1\]\.MaxFreq: 9000000 is above "
                                          r"cpuinfo_max_freq 3500000"):
        n.apply(bad)
    assert n.cpu(1) == ECO
    # A configuration without classes: every CPU gets back what it had before the first.
    n.apply("policy:\n  Active: static\n  ReservedResources: {CPU: 1}\n")
    assert n.cpu(1) == {"scaling_min_freq": "800000", "scaling_max_freq": "3500000", "scaling_governor": "powersave",
                        "energy_performance_preference": "balance_performance", "C6": "0", "C1": "0"}
    assert n.ctl.state().to_document()["cpu_classes"] == {}


def test_the_annotation_names_a_containers_class_and_shutdown_leaves_the_cpus_as_they_are(node_factory):
    n = node_factory()
    n.kubelet.start_pod(guaranteed("g", {"cpuclass.resource-policy.nri.io/pod": "eco"}))
    assert n.cpu(1) == ECO
    n.kubelet.delete_all_pods()
    n.kubelet.start_pod(guaranteed("h"))
    assert n.cpu(1) == TURBO
    n.loop.run(n.ctl.close())  # as nri-plugins: a stop writes nothing back (a restart keeps the classes)
    assert n.cpu(1) == TURBO


def test_a_write_the_kernel_refuses_is_one_error_shown_counted_and_tried_again(node_factory, caplog):
    n = node_factory()
    gov = f"{CPU}/cpu1/cpufreq/scaling_governor"
    n.files.refuse[gov] = errno.EBUSY
    caplog.set_level(logging.ERROR, logger="cri_resmgr")
    g = n.kubelet.start_pod(guaranteed("g"))
    assert n.kubelet.container_status(g.container_ids["c"]).status.state == 1  # the container runs all the same
    assert n.file(gov) == "powersave" and n.file(f"{CPU}/cpu1/cpufreq/scaling_max_freq") == "3500000"
    errors = [r.getMessage() for r in caplog.records if "CPU class" in r.getMessage()]
    assert errors == [f"CPU class: writing 'performance' to {n.root}/{gov} failed: Device or resource busy"]
    doc = n.ctl.state().to_document()
    assert doc["cpu_class_failures"] == [{"path": gov, "value": "performance", "error": "Device or resource busy"}]
    assert f"CPU class write refused: 'performance' to {gov}: Device or resource busy" in \
        text.render(view.build(doc)).splitlines()
    samples = {s.name: s.value for m in EngineCollector(n.ctl).collect() for s in m.samples}
    assert samples["cri_resmgr_cpu_class_failures_total"] >= 1 and samples["cri_resmgr_cpu_class_failing_files"] == 1
    # The next decision tries again; once the kernel takes it, the failure is gone.
    del n.files.refuse[gov]
    n.kubelet.start_pod(PodSpec(name="be", containers=[ContainerSpec(name="c")]))
    assert n.file(gov) == "performance"
    assert n.ctl.state().to_document()["cpu_class_failures"] == []


NO_CLASSES = "policy:\n  Active: static\n  ReservedResources: {CPU: 1}\n"
ORIGINAL = {"scaling_min_freq": "800000", "scaling_max_freq": "3500000", "scaling_governor": "powersave",
            "energy_performance_preference": "balance_performance", "C6": "0", "C1": "0"}


def restarted(n: Node, containerd, config: str) -> None:
    """Stopped (nothing written back) and started again on the same host and state directory."""
    n.loop.run(n.relay.stop(1))
    n.loop.run(n.ctl.close())
    settings = EngineSettings(state_dir=str(n.dir / "state"), host_root=str(n.root))

    async def again():
        up = Upstream(str(containerd.socket))
        relay = GrpcRelay(n.sock, up, up, MethodTable())
        ctl = Controller(settings, default_registry(), TransportFeed(relay), CriRuntime(up), lambda *a: None,
                         host_files=n.files)
        await ctl.apply(parse_document(config, "test config", default_registry().names()))
        await relay.start()
        return relay, ctl

    n.relay, n.ctl = n.loop.run(again())


def test_a_restart_keeps_the_classes_and_what_was_there_before_the_first(node_factory, containerd):
    n = node_factory()
    n.kubelet.start_pod(guaranteed("g"))
    assert n.cpu(1) == TURBO
    start = len(n.files.writes)
    restarted(n, containerd, CONFIG)
    assert n.cpu(1) == TURBO and n.cpu(0) == ECO
    assert n.files.writes[start:] == []  # the files hold the classes already
    # A configuration without classes gives back what was there before the first run wrote.
    n.apply(NO_CLASSES)
    assert n.cpu(1) == n.cpu(0) == ORIGINAL


def test_a_restart_without_classes_or_without_a_cpus_class_gives_back_what_was_there(node_factory, containerd):
    n = node_factory()
    n.kubelet.start_pod(guaranteed("g"))
    assert n.cpu(1) == TURBO
    # Restarted with the exclusive class gone: CPU 1 (still the container's) has none, so its own values.
    restarted(n, containerd, CONFIG.replace("    DefaultExclusiveCPUClass: turbo\n", ""))
    assert n.cpu(1) == ORIGINAL and n.cpu(0) == ECO
    assert n.file(f"{UNCORE}/min_freq_khz") == "1200000"
    # Restarted with no classes at all: every CPU its own values.
    restarted(n, containerd, NO_CLASSES)
    assert n.cpu(0) == n.cpu(1) == ORIGINAL


def test_the_kept_originals_are_the_owners_alone_and_a_bad_file_is_a_warning(tmp_path, caplog):
    from cri_resmgr.engine.cpuclasses import CpuClassControl

    saved = tmp_path / "state" / "cpu-class-originals.json"
    saved.parent.mkdir()
    saved.write_text('{"version": 1, "files": [')
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    CpuClassControl(cpufreq.KernelLike(str(tmp_path)), saved=str(saved))
    assert [r.getMessage() for r in caplog.records if "cannot read what the CPUs held" in r.getMessage()]
    # Written whole, renamed into place, for the owner only.
    from cri_resmgr.engine import originals
    originals.save(str(saved), {"sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq": "3500000"}, "CPU classes")
    assert (saved.stat().st_mode & 0o777) == 0o600
    assert originals.load(str(saved), "CPU classes", "the CPUs") == {
        "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq": "3500000"}


def test_a_class_changed_by_a_new_configuration_is_written_to_its_cpus(node_factory):
    n = node_factory()
    assert n.cpu(0)["scaling_max_freq"] == "1800000"
    n.apply(CONFIG.replace("MaxFreq: 1800000", "MaxFreq: 2000000"))  # eco's limit, the same CPUs
    assert n.cpu(0)["scaling_max_freq"] == n.cpu(1)["scaling_max_freq"] == "2000000"
