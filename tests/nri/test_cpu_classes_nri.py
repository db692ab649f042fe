"""CPU classes through the real `cri-resmgr-nri` process and the NRI runtime double, under
balloons: a balloon of a type with a CPUClass gets the class's frequency limits and
governor on its CPUs as its container is created (before the runtime starts it), and its
CPUs go back to IdleCPUClass's when the container goes. The host is a generated 8-CPU tree
with cpufreq, cpuidle and uncore files (tests/harness/cpufreq.py) under -host-root."""

from __future__ import annotations

from pathlib import Path

from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cpufreq
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, guaranteed, pod
from tests.nri.test_plugin_process import run

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
