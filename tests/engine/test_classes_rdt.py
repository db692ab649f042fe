"""RDT and block I/O classes through the whole engine (relay, interceptors, class
controller) against the in-process CRI double, with a host root whose resctrl tree
behaves like the kernel's (tests/harness/resctrl.py): these machines have no RDT.
A started container's cgroup (proc/PID/cgroup, its tasks) is made under the same
root by the double's start hook, where a runtime would have made it."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import pytest
from fake_cri import FakeCRI

from cri_resmgr.config import ConfigError, EngineSettings, parse_document
from cri_resmgr.engine.controller import Controller
from cri_resmgr.engine.cri import TransportFeed
from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.relay.runtime import CriRuntime
from cri_resmgr.transport.grpcrelay import GrpcRelay
from cri_resmgr.transport.methods import MethodTable
from cri_resmgr.transport.upstream import Upstream
from tests.harness import cgroupfs, resctrl, sysfs
from tests.harness.kubelet import Kubelet
from tests.harness.loop import LoopThread
from tests.harness.podspec import ContainerSpec, PodSpec

RDT = """
policy: {Active: static, ReservedResources: {CPU: 1}}
rdt:
  Options: {L3: {Optional: true}, MB: {Optional: true}}
  Partitions:
    shared:
      L3Allocation: "100%"
      MBAllocation: ["100%"]
      Classes:
        besteffort: {L3Allocation: "30%", MBAllocation: ["25%"]}
        guaranteed: {L3Allocation: "100%"}
  QosClasses: {BestEffort: besteffort}
"""
RDT_CLASS = "rdtclass.cri-resource-manager.intel.com/pod"
GROUP = "sys/fs/resctrl/cri-resmgr."


class Node:
    """The engine on a generated host root with a kernel-like resctrl tree and cgroup files
    (tests/harness/cgroupfs.py): v1's blkio hierarchy, or (`cgroup="v2"`) the unified one."""

    def __init__(self, config: str, with_resctrl: bool = True, blkio: bool = True, weight_files: bool = True,
                 cgroup: str = "v1"):
        self.dir = Path(tempfile.mkdtemp(prefix="crirm-cls-", dir="/tmp"))
        self.root = self.dir / "host"
        sysfs.generate(self.root, cores_per_die=2, threads_per_core=1)
        self.cgroup = cgroup
        if cgroup == "v2":
            cgroupfs.build_v2(self.root)
        elif blkio:
            (self.root / "sys/fs/cgroup/blkio").mkdir(parents=True)
        self.weight_files = weight_files
        if with_resctrl:
            resctrl.build(self.root)
        self.files = resctrl.KernelLike(str(self.root))
        self.loop = LoopThread()
        self.fake = FakeCRI(str(self.dir / "fake.sock"))
        self.fake.on_start = self._cgroup
        self.threads: dict[str, list[int]] = {}
        self.loop.run(self.fake.start())
        settings = EngineSettings(state_dir=str(self.dir / "state"), host_root=str(self.root))
        self.sock = str(self.dir / "relay.sock")

        async def start():
            up = Upstream(self.fake.socket_path)
            relay = GrpcRelay(self.sock, up, up, MethodTable())
            ctl = Controller(settings, default_registry(), TransportFeed(relay), CriRuntime(up), lambda *a: None,
                             host_files=self.files)
            await ctl.apply(parse_document(config, "test config", default_registry().names()))
            await relay.start()
            return relay, ctl

        self.relay, self.ctl = self.loop.run(start())
        self.kubelet = Kubelet("unix://" + self.sock, cgroup_root="/crirm-fake-nonexistent/kubepods")

    def _cgroup(self, cid: str, pid: int, path: str) -> None:
        """What runc would have made: the container's blkio (v2: unified) cgroup with its tasks,
        and /proc/PID/cgroup. `weight_files`: the kernel has BFQ's weight files."""
        self.threads[cid] = [pid, pid + 1]
        tasks = "".join(f"{t}\n" for t in self.threads[cid])
        (self.root / f"proc/{pid}").mkdir(parents=True)
        if self.cgroup == "v2":
            d = cgroupfs.v2_cgroup(self.root, path, bfq=self.weight_files)
            (d / "cgroup.threads").write_text(tasks)
            (self.root / f"proc/{pid}/cgroup").write_text(f"0::{path}\n")
            return
        d = self.root / "sys/fs/cgroup/blkio" / path.strip("/")
        d.mkdir(parents=True)
        for name in ("read_bps", "write_bps", "read_iops", "write_iops"):
            (d / f"blkio.throttle.{name}_device").write_text("")
        if self.weight_files:
            (d / "blkio.bfq.weight_device").write_text("default 100\n")
            (d / "blkio.bfq.weight").write_text("100\n")
        (d / "tasks").write_text(tasks)
        (self.root / f"proc/{pid}/cgroup").write_text(f"9:blkio:{path}\n4:pids:{path}\n")

    def new_thread(self, cid: str) -> int:
        c = self.fake.containers[cid]
        tid = c["pid"] + 7
        d = self.root / "sys/fs/cgroup/blkio" / c["cgroups_path"].strip("/")
        with open(d / "tasks", "a") as f:
            f.write(f"{tid}\n")
        return tid

    def apply(self, config: str) -> None:
        self.loop.run(self.ctl.apply(parse_document(config, "new config", default_registry().names())))

    def tasks(self, cls: str) -> set[int]:
        return {int(t) for t in (self.root / (GROUP + cls) / "tasks").read_text().split()}

    def schemata(self, cls: str) -> str:
        return (self.root / (GROUP + cls) / "schemata").read_text()

    def close(self) -> None:
        self.kubelet.close()
        self.loop.run(self.relay.stop(1))
        self.loop.run(self.ctl.close())
        self.loop.run(self.fake.stop())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def node_factory():
    made = []

    def make(*args, **kw):
        n = Node(*args, **kw)
        made.append(n)
        return n

    yield make
    for n in made:
        n.close()



def _ours(record: logging.LogRecord) -> bool:
    """A line of the project's: grpc's asyncio poller logs its own errors now and then
    ("Exception in callback PollerCompletionQueue._handle_events") on a loaded machine."""
    return record.name.startswith("cri_resmgr")

def pod(name, annotations=None, res=None):
    res = res or {}
    return PodSpec(name=name, annotations=annotations or {},
                   containers=[ContainerSpec(name="c", requests=res, limits=res)])


def test_groups_schemata_and_tasks(node_factory):
    n = node_factory(RDT)
    # One group per class, its whole schemata in one write, from info/ (20 bits, 2 ids, MB step 10).
    assert n.schemata("besteffort") == "L3:0=3f;1=3f\nMB:0=30;1=30\n"
    assert n.schemata("guaranteed") == "L3:0=fffff;1=fffff\nMB:0=100;1=100\n"
    schemata_writes = [(rel, text) for rel, text in n.files.writes if rel.endswith("/schemata")]
    assert len(schemata_writes) == 2 and all(text.count("\n") == 2 for _, text in schemata_writes)

    # QoS default (BestEffort -> besteffort), and an annotation naming a class.
    be = n.kubelet.start_pod(pod("be")).container_ids["c"]
    g = n.kubelet.start_pod(pod("g", {RDT_CLASS: "guaranteed"})).container_ids["c"]
    assert n.tasks("besteffort") == set(n.threads[be])
    assert n.tasks("guaranteed") == set(n.threads[g])
    state = {c.pod: c for c in n.ctl.state().containers}
    assert (state["be"].rdt_class, state["g"].rdt_class) == ("besteffort", "guaranteed")
    assert state["be"].to_document()["rdt_class"] == "besteffort"

    # A new thread of a running container is moved by the reconcile.
    tid = n.new_thread(be)
    n.loop.run(n.ctl.reconcile())
    assert tid in n.tasks("besteffort")

    # Metrics count the assignments.
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for m in EngineCollector(n.ctl).collect() for s in m.samples}
    assert samples[("cri_resmgr_class_assignments_total", (("class", "besteffort"), ("kind", "rdt")))] == 1

    # A class the new configuration no longer has: its group goes, its tasks back to the root group.
    n.apply(RDT.replace('        guaranteed: {L3Allocation: "100%"}\n', ""))
    assert not (n.root / (GROUP + "guaranteed")).exists()
    root_tasks = {int(t) for t in (n.root / "sys/fs/resctrl/tasks").read_text().split()}
    assert set(n.threads[g]) <= root_tasks
    assert {c.pod: c.rdt_class for c in n.ctl.state().containers}["g"] is None


def test_over_subscription_is_refused_when_given(node_factory):
    n = node_factory(RDT)
    before = n.schemata("besteffort")
    too_many = RDT.replace("  QosClasses", "        c3: {}\n        c4: {}\n  QosClasses")
    with pytest.raises(ConfigError, match=r"new config: rdt: 4 classes need 4 CLOSes .* the hardware has 4"):
        n.apply(too_many)
    over = RDT.replace('      L3Allocation: "100%"\n      MBAllocation', '      L3Allocation: "70%"\n      MBAllocation') \
        .replace("  QosClasses", '    other:\n      L3Allocation: "50%"\n      Classes: {x: {}}\n  QosClasses')
    with pytest.raises(ConfigError, match=r"rdt\.Partitions\.other\.L3Allocation: the partitions ask for 120% "
                                          r"of cache id 0: over-subscribed"):
        n.apply(over)
    too_few_bits = RDT.replace('"30%"', '"0x1"')
    with pytest.raises(ConfigError, match=r"Classes\.besteffort\.L3Allocation: 0x1 has fewer than the 2 bits"):
        n.apply(too_few_bits)
    # What was in force stays in force.
    assert n.schemata("besteffort") == before
    assert sorted(p.name for p in (n.root / "sys/fs/resctrl").iterdir() if p.name.startswith("cri-resmgr.")) == \
        ["cri-resmgr.besteffort", "cri-resmgr.guaranteed"]


def test_unknown_class_is_warned_once_and_the_container_starts(node_factory, caplog):
    n = node_factory(RDT)
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    cid = n.kubelet.start_pod(pod("odd", {RDT_CLASS: "gold"})).container_ids["c"]
    assert n.fake.containers[cid]["state"] == 1  # running
    n.loop.run(n.ctl.reconcile())
    n.apply(RDT + "\n")  # a reconfiguration re-checks every container
    lines = [r.getMessage() for r in caplog.records if "gold" in r.getMessage()]
    assert lines == ["default/odd:c: rdt class 'gold' is not in the configuration (classes: besteffort, "
                     "guaranteed); the container runs without one"]
    assert not set(n.threads[cid]) & (n.tasks("besteffort") | n.tasks("guaranteed"))
    assert n.ctl.stats().classes.unknown == 1



def test_unknown_class_warnings_are_forgotten_with_the_container(node_factory, caplog):
    """One warning per container: a node's churn of such pods does not grow the set for ever."""
    n = node_factory(RDT)
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    for i in range(3):
        started = n.kubelet.start_pod(pod(f"odd{i}", {RDT_CLASS: f"gold{i}"}))
        n.kubelet.stop_pod(started.sandbox_id)
        n.kubelet.remove_pod(started.sandbox_id)
    n.loop.run(n.ctl.reconcile())
    assert sum("is not in the configuration" in r.getMessage() for r in caplog.records) == 3
    assert n.ctl.stats().classes.unknown == 3
    assert n.ctl._classes._unknown_warned == {}  # nothing kept of the containers gone

def test_no_resctrl_one_warning_and_everything_else_works(node_factory, caplog):
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    n = node_factory(RDT, with_resctrl=False)
    n.kubelet.start_pod(pod("be"))
    n.apply(RDT + "\n")
    lines = [r.getMessage() for r in caplog.records if "resctrl" in r.getMessage()]
    assert lines == [f"RDT classes are chosen but not enforced: no resctrl at {n.root}/sys/fs/resctrl "
                     "(not mounted, or no RDT on this machine)"]
    assert {c.pod: c.rdt_class for c in n.ctl.state().containers}["be"] == "besteffort"


def test_blockio_rules_in_the_containers_cgroup_and_cleared(node_factory):
    config = ("policy: {Active: static, ReservedResources: {CPU: 1}}\n"
              "blockio:\n  Classes:\n    slow: [{Devices: [/dev/fakedisk], ThrottleWriteBps: 1Mi}]\n"
              "  QosClasses: {BestEffort: slow}\n")
    n = node_factory(config, with_resctrl=False)
    n.files.block_device = lambda rel: (8, 16) if rel == "dev/fakedisk" else None  # no mknod in tests
    (n.root / "dev").mkdir(exist_ok=True)
    (n.root / "dev/fakedisk").write_text("")
    cgroupfs.disk(n.root, "8:16", "bfq")
    n.apply(config)
    cid = n.kubelet.start_pod(pod("be")).container_ids["c"]
    d = n.root / "sys/fs/cgroup/blkio" / n.fake.containers[cid]["cgroups_path"].strip("/")
    assert (d / "blkio.throttle.write_bps_device").read_text() == "8:16 1048576\n"
    n.apply(config.replace("ThrottleWriteBps: 1Mi", "ThrottleReadBps: 2M, Weight: 300"))
    assert (d / "blkio.throttle.read_bps_device").read_text() == "8:16 2000000\n"
    assert (d / "blkio.bfq.weight_device").read_text() == "default 100\n8:16 300\n"
    assert (d / "blkio.throttle.write_bps_device").read_text() == ""  # cleared: the class no longer has it
    # Back to no class (the QoS default removed): every rule goes (BFQ's with "8:16 default").
    n.apply(config.replace("  QosClasses: {BestEffort: slow}\n", ""))
    assert [(d / f).read_text() for f in ("blkio.throttle.read_bps_device", "blkio.bfq.weight_device")] == \
        ["", "default 100\n"]
    assert n.ctl.stats().classes.failures["blockio"] == 0


def test_an_agent_push_the_hardware_cannot_give_is_rejected_with_the_reason(node_factory):
    n = node_factory(RDT)
    modules = {"policy": "Active: static\nReservedResources: {CPU: 1}\n",
               "rdt": "Partitions: {p: {L3Allocation: '100%', Classes: {a: {}, b: {}, c: {}, d: {}}}}"}
    error = n.loop.run(n.ctl.apply_agent(modules, "ConfigMap cri-resmgr-config.default"))
    assert error == ("ConfigMap cri-resmgr-config.default: rdt: 4 classes need 4 CLOSes besides the root group's; "
                     "the hardware has 4 in all (info/*/num_closids)")
    assert n.ctl.config is not None and n.ctl.config.source == "test config"  # what was in force stays


def test_missing_cgroup_files_one_warning_and_failures_counted(node_factory, caplog):
    config = ("policy: {Active: static, ReservedResources: {CPU: 1}}\n"
              "blockio: {Classes: {w: [{Weight: 200}]}, QosClasses: {BestEffort: w}}\n")
    n = node_factory(config, with_resctrl=False, weight_files=False)  # a kernel without the weight files
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    n.kubelet.start_pod(pod("a"))
    n.kubelet.start_pod(pod("b"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and _ours(r)]
    assert len(warnings) == 2 and warnings[0].startswith(
        "block I/O: the container cgroups here have no blkio.bfq.weight_device or blkio.weight_device, "
        "blkio.bfq.weight or blkio.weight (first seen in ")
    # The write that needs the file: refused, said once for the class (not per container), counted per container.
    assert warnings[1].startswith("default/a:c: block I/O class w: the kernel refused '200' into ") and \
        warnings[1].endswith("/blkio.weight: ENOENT (No such file or directory); the class's other lines are "
                             "written. Said once per class, file and line; `cri-resmgr status` shows what is "
                             "refused now")
    stats = n.ctl.stats().classes
    assert stats.assignments == {("blockio", "w"): 2} and stats.failures["blockio"] == 2
    assert [(r.cls, r.file, r.line, r.containers) for r in stats.refused] == [("w", "blkio.weight", "200", 2)]


def test_a_machine_without_blkio_one_warning(node_factory, caplog):
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    config = ("policy: {Active: static, ReservedResources: {CPU: 1}}\n"
              "blockio: {Classes: {w: [{Weight: 200}]}, QosClasses: {BestEffort: w}}\n")
    n = node_factory(config, with_resctrl=False, blkio=False)
    n.apply(config)
    n.kubelet.start_pod(pod("a"))
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and _ours(r)]
    assert lines == [f"block I/O classes are chosen but not enforced: no blkio (cgroup v1) or io (cgroup v2) "
                     f"controller under {n.root}/sys/fs/cgroup"]
    assert {c.pod: c.blockio_class for c in n.ctl.state().containers} == {"a": "w"}


def test_a_class_change_moves_the_tasks_and_no_class_gives_them_back(node_factory):
    n = node_factory(RDT)
    be = n.kubelet.start_pod(pod("be")).container_ids["c"]
    other = 4242  # a thread in the root group that is none of ours: never written anywhere
    root_tasks = n.root / "sys/fs/resctrl/tasks"
    root_tasks.write_text(root_tasks.read_text() + f"{other}\n")
    assert n.tasks("besteffort") == set(n.threads[be])
    n.apply(RDT.replace("QosClasses: {BestEffort: besteffort}", "QosClasses: {BestEffort: guaranteed}"))
    assert (n.tasks("besteffort"), n.tasks("guaranteed")) == (set(), set(n.threads[be]))
    n.apply(RDT.replace("  QosClasses: {BestEffort: besteffort}\n", ""))
    assert n.tasks("guaranteed") == set()
    assert set(n.threads[be]) | {other} <= {int(t) for t in root_tasks.read_text().split()}
    assert not [w for w in n.files.writes if w[1].strip() == str(other)]
    assert {c.pod: c.rdt_class for c in n.ctl.state().containers}["be"] is None


def test_other_tools_groups_hold_closes_too(node_factory):
    three = RDT.replace("  QosClasses", "        third: {}\n  QosClasses")
    n = node_factory(RDT)
    n.apply(three)  # 3 classes, 4 CLOSes: fits beside the root group
    n.apply(RDT)
    n.files.mkdir("sys/fs/resctrl/gold")  # a runtime's own group (goresctrl names it after its class)
    with pytest.raises(ConfigError, match=r"rdt: 3 classes need 3 CLOSes besides the root group's; the hardware "
                                          r"has 4 in all \(info/\*/num_closids\), 1 of them held by other tools' "
                                          r"groups$"):
        n.apply(three)
    assert (n.root / "sys/fs/resctrl/gold").is_dir()  # never touched
