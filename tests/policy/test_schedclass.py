"""Scheduling classes in the policies' sections: every mistake refused with the key, and
a container's class chosen by annotation, then the policy's own rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.balloons.types import parse_config
from cri_resmgr.policy.context import ConfigValueError
from cri_resmgr.policy.schedclass import parse_rules

RT = {"Name": "rt", "Policy": "fifo", "Priority": 42, "Nice": -5, "IOClass": "rt", "IOPriority": 1}
LOW = {"name": "low", "policy": "idle", "ioClass": "idle"}  # nri-plugins' camelCase


def _w(ns: str = "default", qos: QoS = QoS.BURSTABLE, **annotations: str) -> Workload:
    return Workload(key="k", namespace=ns, pod="p", name="c", qos=qos, pod_annotations=annotations)


@pytest.mark.parametrize(("entry", "message"), [
    ({"Name": "x", "Policy": "fifo", "Priority": 200}, "[0].Priority: 200 is not in 1..99 for fifo"),
    ({"Name": "x", "Policy": "rr"}, "[0].Priority: missing (rr needs a priority in 1..99)"),
    ({"Name": "x", "Policy": "other", "Priority": 3}, "[0].Priority: 3 is not 0"),
    ({"Name": "x", "Policy": "iso"}, "[0].Policy: 'iso' is not one of"),
    ({"Name": "x", "Nice": 20}, "[0].Nice: 20 is not in -20..19"),
    ({"Name": "x", "IOClass": "be", "IOPriority": 8}, "[0].IOPriority: 8 is not in 0..7"),
    ({"Name": "x", "IOPriority": 3}, "[0].IOPriority: 3 needs IOClass rt or be"),
    ({"Name": "x", "Policy": "deadline", "Runtime": 100, "Deadline": 50}, "[0].Deadline: 50 is below Runtime"),
    ({"Name": "x", "Policy": "fifo", "Priority": 1, "Runtime": 5}, "[0].Runtime: only the deadline policy"),
    ({"Name": "x", "Policy": "fifo", "Priority": 1, "Flags": ["util-clamp-min"]}, "[0].Flags: 'util-clamp-min'"),
    ({"Name": "x", "Colour": "red"}, "[0].Colour: unknown scheduling class key"),
])
def test_a_bad_class_is_refused_naming_its_key(entry, message):
    with pytest.raises(ConfigValueError) as e:
        parse_config({"SchedulingClasses": [entry]})
    assert str(e.value).startswith("policy.balloons.SchedulingClasses")
    assert message in str(e.value), str(e.value)


def test_a_balloon_type_naming_no_class_is_refused():
    with pytest.raises(ConfigValueError, match=r"^policy\.balloons\.BalloonTypes\[0\]\.SchedulingClass: "
                       r"scheduling class 'gold' is not in SchedulingClasses \(rt\)"):
        parse_config({"SchedulingClasses": [RT], "BalloonTypes": [{"Name": "a", "SchedulingClass": "gold"}]})


def test_irq_modes_need_controllable_interrupts():
    with pytest.raises(ConfigValueError, match=r"BalloonTypes\[0\]\.IRQMode: isolate needs "
                                               r"policy\.balloons\.ControllableInterrupts"):
        parse_config({"BalloonTypes": [{"Name": "a", "IRQMode": "isolate"}]})
    with pytest.raises(ConfigValueError, match=r"IRQMode: sink needs IRQClaim"):
        parse_config({"ControllableInterrupts": [1], "BalloonTypes": [{"Name": "a", "IRQMode": "sink"}]})
    with pytest.raises(ConfigValueError, match=r"ControllableInterrupts\[1\]: '9-3' is not a range"):
        parse_config({"ControllableInterrupts": [1, "9-3"]})


def test_annotation_then_namespace_then_qos():
    rules = parse_rules({"SchedulingClasses": [RT, LOW], "NamespaceSchedulingClasses": {"batch-*": "low"},
                         "PodQoSSchedulingClasses": {"guaranteed": "rt"}}, "policy.topology-aware")
    assert rules.choose(_w(**{"scheduling-class.resource-policy.nri.io/pod": "low"}),).cls.name == "low"
    assert rules.choose(_w(**{"scheduling-class.resource-policy.nri.io/container.c": "rt",
                              "scheduling-class.resource-policy.nri.io/pod": "low"})).cls.name == "rt"
    assert rules.choose(_w(**{"scheduling-class.cri-resource-manager.intel.com": "rt"})).cls.name == "rt"
    assert rules.choose(_w("batch-1", QoS.GUARANTEED)).cls.name == "low"
    assert rules.choose(_w("web", QoS.GUARANTEED)).cls.name == "rt"
    assert rules.choose(_w("web")).cls is None
    unknown = rules.choose(_w(**{"scheduling-class.resource-policy.nri.io": "gold"}))
    assert (unknown.cls, unknown.unknown) == (None, "gold")  # asked by name: not replaced by another


def test_a_balloon_types_class_is_its_containers_default_and_isolate_keeps_irqs_off_its_cpus():
    from cri_resmgr.policy.tuning import Tuned
    from tests.policy.balloons.balloons_testkit import annotated, policy
    from tests.topology.shapes import machine

    p = policy(machine(cores=4), [{"Name": "quiet", "SchedulingClass": "rt", "IRQMode": "isolate", "MinCPUs": 2},
                                  {"Name": "net", "IRQClaim": ["virtio*-input*"], "MinCPUs": 1}],
               SchedulingClasses=[RT, LOW], ControllableInterrupts=["30-39", "virtio*"])
    assert isinstance(p, Tuned) and p.tunes
    assert p.scheduling_class(annotated("a", "quiet", 2000)).cls.name == "rt"  # before it is placed
    p.allocate(annotated("a", "quiet", 2000))
    p.allocate(annotated("b", "net", 1000))
    assert p.scheduling_class(annotated("a", "quiet", 2000)).cls.name == "rt"
    a = annotated("a", "quiet", 2000)
    over = replace(a, pod_annotations={**a.pod_annotations, "scheduling-class.resource-policy.nri.io": "low"})
    assert p.scheduling_class(over).cls.name == "low"
    assert p.scheduling_class(annotated("b", "net", 1000)).cls is None
    intent = p.irq_intent()
    quiet = next(b for b in p.balloons() if b.type.name == "quiet")
    net = next(b for b in p.balloons() if b.type.name == "net")
    assert intent.avoid == quiet.cpus and len(quiet.cpus) == 2
    assert [cpus for _, cpus in intent.sinks] == [net.cpus]
    assert intent.controllable.selects(33, "x") and intent.controllable.selects(50, "virtio9-config")
    assert not intent.controllable.selects(50, "ttyS0")
    p.release("a")
    assert not p.irq_intent().avoid  # its balloon gone with it: no CPU is avoided


def test_topology_aware_keeps_controllable_irqs_off_exclusive_cpus():
    from cri_resmgr.policy.context import build_context
    from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
    from tests.topology.shapes import machine

    p = TopologyAwarePolicy(build_context(machine(cores=4, threads=1), reserved=1, options={
        "ControllableInterrupts": ["*nvme*"], "SchedulingClasses": [RT], "PodQoSSchedulingClasses": {"Guaranteed": "rt"}}))
    assert p.tunes and not p.irq_intent().avoid
    w = Workload(key="g", namespace="default", pod="p", name="c", qos=QoS.GUARANTEED, cpu_request=2000,
                 cpu_limit=2000)
    d = p.allocate(w)
    assert p.irq_intent().avoid == d.resources.cpuset_cpus and len(d.resources.cpuset_cpus) == 2
    assert p.scheduling_class(w).cls.name == "rt"
    p.release("g")
    assert not p.irq_intent().avoid
