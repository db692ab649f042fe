"""A block I/O Weight class on a cgroup v2 node whose disk has no BFQ (issue 33.1), through
the whole engine (relay, class controller, reconcile, /state, status, metrics), on a host root
whose cgroup files take and refuse writes as the kernel's do (tests/harness/cgroupfs.py):
the per-device line is refused with EOPNOTSUPP, `default 400` is written all the same, the
refusal is said once naming the file, and shown until the kernel takes it."""

from __future__ import annotations

import logging

import pytest
from test_classes_rdt import Node, _ours, pod

from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.status import command
from tests.harness import cgroupfs

CONFIG = ("policy: {Active: static, ReservedResources: {CPU: 1}}\n"
          "blockio:\n  Classes:\n    w: [{Weight: 400}, {Devices: [/dev/vda], Weight: 700}]\n"
          "  QosClasses: {BestEffort: w}\n")


@pytest.fixture
def v2_node():
    made: list[Node] = []

    def make(bfq: bool) -> Node:
        """A v2 node with its disk 254:0 at /dev/vda; `bfq`: the kernel has BFQ (io.bfq.weight files)."""
        made.append(Node(CONFIG, with_resctrl=False, cgroup="v2", weight_files=bfq))
        n = made[-1]
        n.files.block_device = lambda rel: (254, 0) if rel == "dev/vda" else None  # type: ignore[method-assign]
        (n.root / "dev").mkdir(exist_ok=True)
        (n.root / "dev/vda").write_text("")
        return n

    yield make
    for n in made:
        n.close()


def _refused_gauge(n) -> dict[tuple[str, ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for m in EngineCollector(n.ctl).collect()
            for s in m.samples if s.name == "cri_resmgr_class_refused_lines"}


def test_a_weight_class_on_v2_without_bfq(v2_node, caplog):
    n = v2_node(bfq=False)  # no BFQ module: no io.bfq.weight
    cgroupfs.disk(n.root, "254:0", "mq-deadline", name="vda")
    cgroupfs.disk(n.root, "7:0", "none", name="loop0")  # not a disk a weight is meant for: not named
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    caplog.clear()  # the node's first configuration, applied before /dev/vda was there
    n.apply(CONFIG)
    # Said when the configuration is applied: no disk weighs the cgroups' weights, and the
    # kernel will refuse the device's weight.
    told = [r.getMessage() for r in caplog.records if _ours(r)]
    assert told == ["new config: blockio.Classes.w: the cgroup's Weight 400 counts on no disk here: a weight counts "
                    "only on a disk whose I/O scheduler is bfq or with io.cost enabled, and none is (vda "
                    "(mq-deadline)); it is written all the same",
                    f"new config: blockio.Classes.w: the Weight of 254:0 will not take: the I/O scheduler of 254:0 "
                    f"is mq-deadline, not bfq ({n.root}/sys/dev/block/254:0/queue/scheduler), and io.cost is not "
                    f"enabled for it ({n.root}/sys/fs/cgroup/io.cost.qos): a per-device weight needs one of them; "
                    "the class's other rules are written"]
    caplog.clear()
    ids = [n.kubelet.start_pod(pod(name)).container_ids["c"] for name in ("a", "b")]
    dirs = [n.root / "sys/fs/cgroup" / n.fake.containers[cid]["cgroups_path"].strip("/") for cid in ids]
    # The cgroup's own weight is in force, though the device's line was refused.
    assert [(d / "io.weight").read_text() for d in dirs] == ["default 400\n"] * 2
    for _ in range(3):
        n.loop.run(n.ctl.reconcile())
    lines = [r for r in caplog.records if _ours(r) and r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in lines] == [
        f"default/a:c: block I/O class w: the kernel refused '254:0 700' into {dirs[0]}/io.weight: EOPNOTSUPP "
        f"(Operation not supported) (the I/O scheduler of 254:0 is mq-deadline, not bfq "
        f"({n.root}/sys/dev/block/254:0/queue/scheduler), and io.cost is not enabled for it "
        f"({n.root}/sys/fs/cgroup/io.cost.qos): a per-device weight needs one of them); the class's other lines "
        "are written. Said once per class, file and line; `cri-resmgr status` shows what is refused now"]
    stats = n.ctl.stats().classes
    assert stats.failures["blockio"] == 2  # once per container, not per reconcile

    # /state, `cri-resmgr status` (text and JSON) and the metrics show it.
    doc = n.ctl.state().to_document()
    assert doc["blockio_refused"] == [{"class": "w", "file": "io.weight", "line": "254:0 700",
                                       "reason": "EOPNOTSUPP (Operation not supported)", "containers": 2,
                                       "example": "default/a:c", "path": f"{dirs[0]}/io.weight"}]
    text = command.render(doc, "text")
    assert text.splitlines()[-2:] == ["Warnings:", "  block I/O class w: the kernel refuses '254:0 700' in io.weight: "
                                      "EOPNOTSUPP (Operation not supported); 2 containers (first default/a:c: "
                                      f"{dirs[0]}/io.weight)"]
    assert '"blockio_refused": [' in command.render(doc, "json")
    assert _refused_gauge(n) == {(("class", "w"), ("file", "io.weight"), ("kind", "blockio"),
                                  ("reason", "EOPNOTSUPP")): 2}

    # io.cost enabled for the disk: the next reconcile's write is taken, and nothing is refused any more.
    cgroupfs.disk(n.root, "254:0", "mq-deadline", iocost=True)
    n.loop.run(n.ctl.reconcile())
    assert [(d / "io.weight").read_text() for d in dirs] == ["default 400\n254:0 700\n"] * 2
    assert n.ctl.state().to_document()["blockio_refused"] == [] and n.ctl.stats().classes.refused == ()
    assert _refused_gauge(n) == {}
    assert "Warnings:" not in command.render(n.ctl.state().to_document(), "text")


def test_a_weight_class_on_v2_with_bfq_is_in_force_without_a_word(v2_node, caplog):
    n = v2_node(bfq=True)
    cgroupfs.disk(n.root, "254:0", "bfq", name="vda")
    caplog.set_level(logging.WARNING, logger="cri_resmgr")
    caplog.clear()
    n.apply(CONFIG)
    cid = n.kubelet.start_pod(pod("a")).container_ids["c"]
    n.loop.run(n.ctl.reconcile())
    d = n.root / "sys/fs/cgroup" / n.fake.containers[cid]["cgroups_path"].strip("/")
    assert (d / "io.bfq.weight").read_text() == "default 400\n254:0 700\n"
    assert (d / "io.weight").read_text() == "default 400\n"
    assert [r.getMessage() for r in caplog.records if _ours(r)] == []
    assert n.ctl.stats().classes.failures["blockio"] == 0 and n.ctl.state().to_document()["blockio_refused"] == []
