"""A Topology back from `cri-resmgr topology -o json`: the same model, and errors naming the field."""

from __future__ import annotations

import json

import pytest

from cri_resmgr.simulate import machine
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import TopologyError, discover
from cri_resmgr.topology.load import loads
from cri_resmgr.topology.render import render_json, render_text
from tests.harness import sysfs_classes as classes
from tests.harness.sysfs_classes import write_machine


@pytest.mark.parametrize("name", ["hybrid", "memory_tiers", "power_unknown_package", "l3_per_ccx", "big_little"])
def test_discovered_machines_come_back_the_same(tmp_path, name):
    write_machine(tmp_path, classes.CLASSES[name]())
    t = discover(tmp_path)
    back = loads(render_json(t))
    assert render_json(back) == render_json(t) and render_text(back) == render_text(t)
    assert back.groups("l3") == t.groups("l3") and back.isolated == t.isolated


def test_generated_shape_comes_back_the_same():
    t = topology_of("2s/4n/8c/2t/interleaved/2cxl")
    assert render_json(loads(render_json(t))) == render_json(t)


def _doc() -> dict:
    return json.loads(render_json(topology_of("1s/2n/4c/2t")))


@pytest.mark.parametrize("change, says", [
    (lambda d: d.pop("cpus"), "missing 'cpus'"),
    (lambda d: d["cpus"][3].update(siblings="2-x"), "cpus[3].siblings: invalid CPU list"),
    (lambda d: d["cpus"][0].update(node=7), "CPU 0 is in unknown NUMA node 7"),
    (lambda d: d["nodes"][1].update(memory_kb="lots"), "nodes[1].memory_kb: expected a non-negative integer"),
    (lambda d: d["nodes"][0].update(kind="flash"), "nodes[0].kind: 'flash' is not one of"),
    (lambda d: d.update(cpus={}), "cpus: expected a list"),
])
def test_bad_documents_name_the_file_and_the_field(tmp_path, change, says):
    doc = _doc()
    change(doc)
    path = tmp_path / "node.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TopologyError) as e:
        machine.from_json_file(str(path))
    assert str(e.value).startswith(str(path)) and says in str(e.value)


def test_not_json_and_missing_file(tmp_path):
    path = tmp_path / "node.json"
    path.write_text('{"cpus": [')
    with pytest.raises(TopologyError, match=f"{path}: not JSON"):
        machine.from_json_file(str(path))
    with pytest.raises(TopologyError, match="cannot read topology JSON"):
        machine.from_json_file(str(tmp_path / "none.json"))


def test_host_root_tarball(tmp_path):
    import tarfile

    write_machine(tmp_path / "root", classes.hybrid())
    tgz = tmp_path / "node.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(tmp_path / "root" / "sys", arcname="sys")
    assert render_json(machine.from_host_root(str(tgz))) == render_json(discover(tmp_path / "root"))
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(TopologyError, match="bad.tgz: cannot unpack"):
        machine.from_host_root(str(bad))
    with pytest.raises(TopologyError, match="no such directory or tarball"):
        machine.from_host_root(str(tmp_path / "none"))
