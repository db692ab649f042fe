"""CPU classes through the real `cri-resmgr-nri` process and the NRI runtime double, under
balloons: a balloon of a type with a CPUClass gets the class's frequency limits and
governor on its CPUs as its container is created (before the runtime starts it), and its
CPUs go back to IdleCPUClass's when the container goes. The host is a generated 8-CPU tree
with cpufreq, cpuidle and uncore files (tests/harness/cpufreq.py) under -host-root. Then
the same process on real containerd 2.1.9 (NRI), static: a Guaranteed container's exclusive
CPU gets the exclusive class, and the shared pool's class back when the pod goes; the tree
there has this machine's 2 CPUs, so the cpusets are ones runc can give."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cpufreq, runtimes, sysfs
from tests.harness.podspec import ContainerSpec, PodSpec
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, guaranteed, pod
from tests.nri.test_plugin_process import run
from tests.nri.test_real_runtimes import kubelet_on, plugin_dir, wait_for  # noqa: F401 (fixtures)

CONFIG = """policy:
  Active: balloons
  ReservedResources: {CPU: 1}
  balloons:
    CPUClasses:
      - {Name: turbo, MinFreq: 3000000, MaxFreq: 3500000, FreqGovernor: performance, DisabledCstates: [C6]}
      - {Name: eco, MaxFreq: 1800000, FreqGovernor: powersave}
    IdleCPUClass: eco
    BalloonTypes:
      - {Name: fast, CpuClass: turbo, Namespaces: [fast], MinCPUs: 0, PreferNewBalloons: true}
"""
CPU = "sys/devices/system/cpu"


def values(host: Path, cpu: int) -> tuple[str, str, str, str]:
    f = host / CPU / f"cpu{cpu}"
    return tuple((f / n).read_text().strip() for n in (  # type: ignore[return-value]
        "cpufreq/scaling_min_freq", "cpufreq/scaling_max_freq", "cpufreq/scaling_governor",
        "cpuidle/state3/disable"))


TURBO = ("3000000", "3500000", "performance", "1")
ECO = ("800000", "1800000", "powersave", "0")


def test_a_balloons_cpus_get_its_types_class_and_the_idle_class_back(workdir: Path) -> None:
    host = workdir / "host"
    cpufreq.build(host, range(8))

    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        # Every CPU but the reserved one is idle (in no balloon): the idle class.
        assert {values(host, c) for c in range(1, 8)} == {ECO}
        await double.run_pod(pod("g", "guaranteed", namespace="fast"))
        await double.create(guaranteed("g1", "g", 2))
        mine = CPUSet.parse(double.cpus("g1"))
        assert len(mine) == 2 and 0 not in mine
        assert {values(host, c) for c in mine} == {TURBO}
        assert {values(host, c) for c in set(range(1, 8)) - set(mine)} == {ECO}
        await double.stop("g1")
        await double.remove("g1")
        assert {values(host, c) for c in range(1, 8)} == {ECO}

    before = cpufreq.files_under(Path("/"))
    plugin = run(workdir, scenario, forced=CONFIG)
    assert "cannot take effect" not in plugin.log()
    assert cpufreq.files_under(Path("/")) == before  # this machine's own files are untouched


STATIC = """policy:
  Active: static
  ReservedResources: {CPU: 1}
  static:
    CPUClasses:
      - {Name: turbo, MinFreq: 3000000, MaxFreq: 3500000, FreqGovernor: performance, DisabledCstates: [C6]}
      - {Name: eco, MaxFreq: 1800000, FreqGovernor: powersave}
    DefaultExclusiveCPUClass: turbo
    SharedPoolCPUClass: eco
"""


@pytest.mark.parametrize("nri_containerd", [runtimes.CONTAINERD_2], indirect=True, ids=["containerd-2.1.9"])
def test_on_containerd_2_a_guaranteed_containers_cpu_gets_its_class_and_the_pools_back(
        nri_containerd, kubelet_on, plugin_dir, tmp_path):  # noqa: F811
    host = tmp_path / "host"
    sysfs.generate(host, cores_per_die=2, threads_per_core=1)  # this machine's 2 CPUs: real cpusets
    cpufreq.build(host, [0, 1])
    before = cpufreq.files_under(Path("/"))
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), str(host), STATIC).start()
    k = kubelet_on
    try:
        wait_for("the plugin's policy", lambda: "policy static active" in plugin.log(), plugin.log)
        assert values(host, 1) == ECO
        res = {"cpu": "1", "memory": "64Mi"}
        g = k.start_pod(PodSpec(name="nri-turbo", containers=[ContainerSpec(name="c", requests=res, limits=res)]))
        assert k.cgroup_files(g.container_ids["c"]).cpuset_cpus() == "1", plugin.log()[-3000:]
        # In place when the runtime's CreateContainer returns: written in the plugin's hook.
        assert values(host, 1) == TURBO and values(host, 0) == ECO
        k.delete_pod(g)
        wait_for("CPU 1 back in the shared pool's class", lambda: values(host, 1) == ECO, plugin.log, 20)
    finally:
        plugin.stop()
    assert cpufreq.files_under(Path("/")) == before
