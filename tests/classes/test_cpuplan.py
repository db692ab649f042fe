"""CPU classes without a runtime: the configuration's classes parsed (policy/cpuclasses.py),
checked against a machine (classes/cpuplan.py check), each CPU's class from a policy's
allocation state (assign), the files that follow (wanted, changes), and the writer on a
kernel-like tree (classes/cpufreq.py over tests/harness/cpufreq.py): refusals, order,
what was there given back."""

from __future__ import annotations

import errno
import logging

import pytest

from cri_resmgr.classes import cpuplan
from cri_resmgr.classes.cpufreq import CpuFreqWriter
from cri_resmgr.classes.hostfs import DryRun
from cri_resmgr.config.classes import ClassConfigError
from cri_resmgr.policy.api import PolicyContext, QoS, Workload
from cri_resmgr.policy.balloons.policy import BalloonsPolicy
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.cpuclasses import parse_classes
from cri_resmgr.policy.static import StaticPolicy
from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness import cpufreq, sysfs

TURBO = {"Name": "turbo", "MinFreq": 3000000, "MaxFreq": 3500000, "FreqGovernor": "performance"}
ECO = {"Name": "eco", "MaxFreq": 1800000}


def g(key: str, cpus: int = 1, annotations: dict[str, str] | None = None) -> Workload:
    return Workload(key=key, namespace="default", pod=key, name="c", qos=QoS.GUARANTEED, cpu_request=1000 * cpus,
                    cpu_limit=1000 * cpus, pod_annotations=annotations or {})


def ctx(options: dict, cpus: int = 4) -> PolicyContext:
    topo = sysfs.fake_topology(cores_per_die=cpus, threads_per_core=1)
    return PolicyContext(topology=topo, available=topo.online, reserved=CPUSet([0]), options=options)


@pytest.mark.parametrize("entry,error", [
    ({"Name": "x", "MinFreq": 2000000, "MaxFreq": 1200000},
     r"policy\.topology-aware\.CPUClasses\[1\]\.MaxFreq: 1200000 is below MinFreq 2000000"),
    ({"Name": "x", "UncoreMinFreq": 2000000, "UncoreMaxFreq": 1000},
     r"CPUClasses\[1\]\.UncoreMaxFreq: 1000 is below UncoreMinFreq 2000000"),
    ({"Name": "x", "MaxFreq": -1}, r"CPUClasses\[1\]\.MaxFreq: expected a frequency in kHz"),
    ({"Name": "x", "MaxFreq": "fast"}, r"CPUClasses\[1\]\.MaxFreq: expected a frequency in kHz"),
    ({"Name": "x", "Turbo": True}, r"CPUClasses\[1\]\.Turbo: unknown key"),
    ({"Name": "x", "EnergyPerformancePreference": 300}, r"EnergyPerformancePreference: 300 is outside 0-255"),
    ({"Name": "x y"}, r"CPUClasses\[1\]\.Name: expected a class name"),
    ({"Name": "turbo"}, r"CPUClasses\[1\]\.Name: class 'turbo' is defined twice"),
    ({"Name": "x", "DisabledCstates": [6]}, r"DisabledCstates: expected C-state names"),
])
def test_a_bad_class_is_refused_naming_its_key(entry, error):
    with pytest.raises(ConfigValueError, match=error):
        TopologyAwarePolicy(ctx({"CPUClasses": [TURBO, entry]}))


def test_class_names_are_checked_where_they_are_used():
    with pytest.raises(ConfigValueError, match=r"policy\.static\.SharedPoolCPUClass: no CPU class 'gold' in "
                                               r"CPUClasses \(classes: eco, turbo\)"):
        StaticPolicy(ctx({"CPUClasses": [TURBO, ECO], "SharedPoolCPUClass": "gold"}))
    with pytest.raises(ConfigValueError, match=r"policy\.balloons\.BalloonTypes\[0\]\.CPUClass: no CPU class 'gold'"):
        BalloonsPolicy(ctx({"CPUClasses": [TURBO], "BalloonTypes": [{"Name": "a", "CpuClass": "gold"}]}))
    with pytest.raises(ConfigValueError, match=r"policy\.balloons\.IdleCPUClass: no CPU class 'gold'"):
        BalloonsPolicy(ctx({"IdleCPUClass": "gold"}))
    # Without CPUClasses a type's CpuClass is kept and does nothing, as before.
    p = BalloonsPolicy(ctx({"BalloonTypes": [{"Name": "a", "CpuClass": "turbo"}]}))
    assert p.cpu_classes().empty


def test_nri_plugins_spelling_and_a_mapping_are_read():
    classes = parse_classes({"CPUClasses": [{"name": "t", "minFreq": 1, "maxFreq": 2, "disabledCstates": ["C6"]}]}, "x")
    assert (classes["t"].min_freq, classes["t"].max_freq, classes["t"].disabled_cstates) == (1, 2, ("C6",))
    assert parse_classes({"CPUClasses": {"eco": {"MaxFreq": 5}}}, "x")["eco"].max_freq == 5


def test_static_exclusive_cpus_take_the_default_or_the_annotation_and_the_rest_the_shared_class():
    p = StaticPolicy(ctx({"CPUClasses": [TURBO, ECO, {"Name": "sys"}], "DefaultExclusiveCPUClass": "turbo",
                          "SharedPoolCPUClass": "eco", "ReservedPoolCPUClass": "sys", "StrictReservation": True}))
    a = p.allocate(g("a")).resources.cpuset_cpus
    b = p.allocate(g("b", annotations={"cpuclass.resource-policy.nri.io/pod": "eco"})).resources.cpuset_cpus
    layout = p.cpu_classes()
    assign = cpuplan.assign(layout, p.usage(), {"b": "eco"})
    assert assign[0] == "sys" and {assign[c] for c in a} == {"turbo"} and {assign[c] for c in b} == {"eco"}
    assert {assign[c] for c in CPUSet(range(4)) - a - b - CPUSet([0])} == {"eco"}
    # An annotation naming no class: the container's CPUs get none (not the default).
    assert all(c not in cpuplan.assign(layout, p.usage(), {"b": None}) for c in b)


def test_topology_aware_and_balloons_layouts():
    ta = TopologyAwarePolicy(ctx({"CPUClasses": [TURBO, ECO], "DefaultExclusiveCPUClass": "turbo",
                                  "SharedPoolCPUClass": "eco"}))
    cpus = ta.allocate(g("a", 2)).resources.cpuset_cpus
    assign = cpuplan.assign(ta.cpu_classes(), ta.usage(), {})
    assert {c for c, k in assign.items() if k == "turbo"} == set(cpus) and len(cpus) == 2
    assert {c for c, k in assign.items() if k == "eco"} == set(range(4)) - set(cpus)

    bp = BalloonsPolicy(ctx({"CPUClasses": [TURBO, ECO], "IdleCPUClass": "eco",
                             "BalloonTypes": [{"Name": "fast", "CPUClass": "turbo", "Namespaces": ["default"],
                                               "MinCPUs": 1}]}))
    bp.allocate(g("a"))
    usage = bp.usage()
    fast = next(p.cpus for p in usage.pools if p.kind == "fast")
    assign = cpuplan.assign(bp.cpu_classes(), usage, {})
    assert {c for c, k in assign.items() if k == "turbo"} == set(fast)
    idle = set(range(4)) - set().union(*(set(p.cpus) for p in usage.pools))
    assert idle and all(assign[c] == "eco" for c in idle)


def host(tmp_path, **kw):
    sysfs.generate(tmp_path, cores_per_die=2, threads_per_core=1)
    cpufreq.build(tmp_path, [0, 1], **kw)
    files = cpufreq.KernelLike(str(tmp_path))
    w = CpuFreqWriter(files)
    return files, w, w.host([0, 1], {0: (0, 0), 1: (0, 0)})


@pytest.mark.parametrize("entry,error", [
    ({"Name": "x", "MaxFreq": 5000000}, r"CPUClasses\[0\]\.MaxFreq: 5000000 is above cpuinfo_max_freq 3500000"),
    ({"Name": "x", "MinFreq": 100000}, r"CPUClasses\[0\]\.MinFreq: 100000 is below cpuinfo_min_freq 800000"),
    ({"Name": "x", "FreqGovernor": "ondemand"},
     r"FreqGovernor: ondemand is not available here \(scaling_available_governors: performance powersave"),
    ({"Name": "x", "EnergyPerformancePreference": "fastest"}, r"EnergyPerformancePreference: fastest is not available"),
    ({"Name": "x", "DisabledCstates": ["C9"]}, r"DisabledCstates: no C-state C9 here \(cpuidle/state\*/name: C1, C1E"),
    ({"Name": "x", "UncoreMaxFreq": 9000000}, r"UncoreMaxFreq: 9000000 is outside the uncore's 1200000-2400000"),
])
def test_what_the_kernel_would_refuse_is_refused_at_the_check(tmp_path, entry, error):
    _, _, h = host(tmp_path)
    with pytest.raises(ClassConfigError, match=error):
        cpuplan.check(parse_classes({"CPUClasses": [entry]}, "static").values(), h)


def test_a_machine_without_cpufreq_says_the_classes_cannot_take_effect(tmp_path):
    sysfs.generate(tmp_path, cores_per_die=2, threads_per_core=1)
    h = CpuFreqWriter(cpufreq.KernelLike(str(tmp_path))).host([0, 1], {})
    notes = cpuplan.check(parse_classes({"CPUClasses": [TURBO, {"Name": "c", "DisabledCstates": ["C6"]}]},
                                        "static").values(), h)
    assert notes == [f"CPU classes cannot take effect on this machine, which has no cpufreq ({tmp_path}/"
                     "sys/devices/system/cpu/cpu*/cpufreq) (needed by turbo); no cpuidle states "
                     f"({tmp_path}/sys/devices/system/cpu/cpu*/cpuidle) (needed by c): they are chosen and shown, "
                     "nothing is written for them"]


def test_the_writer_orders_a_pair_gives_back_what_was_there_and_reports_refusals(tmp_path):
    files, w, h = host(tmp_path)
    classes = parse_classes({"CPUClasses": [TURBO, {"Name": "low", "MinFreq": 900000, "MaxFreq": 1000000,
                                                     "FreqGovernor": "powersave"}]}, "static")
    base = "sys/devices/system/cpu/cpu1/cpufreq"
    before: dict[str, str] = {}
    for cls in ("turbo", "low", "turbo"):  # up past the old maximum, down below the old minimum, up again
        want = cpuplan.wanted({1: cls}, classes, h)
        assert w.apply(cpuplan.changes(before, want)) == []
        before = want
        assert files.read(f"{base}/scaling_min_freq").strip() == str(classes[cls].min_freq)
    # No class any more: back to what the files held before the first write.
    assert w.apply(cpuplan.changes(before, {})) == []
    assert [files.read(f"{base}/{n}").strip() for n in ("scaling_min_freq", "scaling_max_freq",
                                                        "scaling_governor")] == ["800000", "3500000", "powersave"]
    assert w.written() == []
    # A value the kernel refuses (a minimum above the maximum that stays) is reported, not raised.
    failures = w.apply({f"{base}/scaling_max_freq": "1000000"}) + w.apply({f"{base}/scaling_min_freq": "2000000"})
    assert [(f.path, f.value, f.error) for f in failures] == [(f"{base}/scaling_min_freq", "2000000",
                                                               "Invalid argument")]


def test_uncore_takes_the_highest_of_its_dies_classes(tmp_path):
    _, _, h = host(tmp_path)
    classes = parse_classes({"CPUClasses": [{"Name": "a", "UncoreMinFreq": 1500000},
                                            {"Name": "b", "UncoreMinFreq": 2000000, "UncoreMaxFreq": 2200000}]}, "s")
    d = cpuplan.uncore_dir(0, 0)
    assert cpuplan.wanted({0: "a", 1: "b"}, classes, h) == {f"{d}/min_freq_khz": "2000000",
                                                            f"{d}/max_freq_khz": "2200000"}
    assert cpuplan.wanted({0: "a"}, classes, h) == {f"{d}/min_freq_khz": "1500000"}


def test_dry_run_writes_nothing(tmp_path, caplog):
    files, _, h = host(tmp_path)
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    w = CpuFreqWriter(DryRun(files))
    classes = parse_classes({"CPUClasses": [TURBO]}, "static")
    assert w.apply(cpuplan.changes({}, cpuplan.wanted({1: "turbo"}, classes, h))) == []
    assert files.writes == []
    assert any("dry-run: would write '3000000' to" in r.getMessage() for r in caplog.records)


def test_the_kernel_like_tree_refuses_and_clamps_as_the_kernel(tmp_path):
    files, _, _ = host(tmp_path)
    base = "sys/devices/system/cpu/cpu0/cpufreq"
    for name, value in (("scaling_governor", "ondemand"), ("energy_performance_preference", "fastest"),
                        ("scaling_min_freq", "fast")):
        with pytest.raises(OSError) as e:
            files.write(f"{base}/{name}", value)
        assert e.value.errno == errno.EINVAL
    files.write(f"{base}/scaling_governor", "performance")
    with pytest.raises(OSError) as e:  # intel_pstate: only performance under the performance governor
        files.write(f"{base}/energy_performance_preference", "power")
    assert e.value.errno == errno.EBUSY
    files.write(f"{base}/scaling_max_freq", "9000000")  # clamped to cpuinfo_max_freq
    assert files.read(f"{base}/scaling_max_freq") == "3500000\n"
    with pytest.raises(OSError):
        files.write("sys/devices/system/cpu/cpu0/cpuidle/state3/disable", "2")
    assert files.writes == [(f"{base}/scaling_governor", "performance"), (f"{base}/scaling_max_freq", "3500000")]


def test_a_cstate_name_is_taken_as_cpuidle_gives_it():
    # This machine's: POLL and "haltpoll idle" (a name with a space).
    classes = parse_classes({"CPUClasses": [{"Name": "x", "DisabledCstates": ["haltpoll idle"]}]}, "static")
    assert classes["x"].disabled_cstates == ("haltpoll idle",)
    host = cpuplan.CpuHost(cstates={0: {"POLL": 0, "haltpoll idle": 1}})
    assert cpuplan.check(classes.values(), host) == []
    assert cpuplan.wanted({0: "x"}, classes, host) == {cpuplan.cstate_file(0, 0): "0", cpuplan.cstate_file(0, 1): "1"}
