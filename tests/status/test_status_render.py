"""`cri-resmgr status` drawing the engine's snapshot: text, JSON and SVG, from a state
built by a real policy and cache (statekit)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from cri_resmgr import flags
from cri_resmgr.config import EngineSettings
from cri_resmgr.engine.controller import Controller
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.status import command, view
from tests.status.statekit import document

SVG = "{http://www.w3.org/2000/svg}"


def test_snapshot_document_has_every_container_with_its_placement():
    doc = document()
    assert doc["format"] == "cri-resmgr-state" and doc["version"] == 1 and doc["policy"] == "static-plus"
    assert doc["config"]["source"] == "/etc/cri-resmgr/config.yaml"
    assert doc["config"]["document"]["policy"]["ReservedResources"] == {"CPU": "cpuset:0"}
    assert doc["pools"] == {"exclusive": "1-2,6-7", "isolated": "6-7", "reserved": "0", "shared": "3-5"}
    by_key = {c["id"][:c["id"].index("-0123")]: c for c in doc["containers"]}
    assert (by_key["k-db"]["pool"], by_key["k-db"]["exclusive_cpus"], by_key["k-db"]["mems"]) == ("isolated", "6-7", "1")
    assert (by_key["k-odd"]["exclusive_cpus"], by_key["k-odd"]["shared_cpus"], by_key["k-odd"]["cpus"]) == \
        ("2", "3-5", "2-5")
    assert (by_key["k-dns"]["pool"], by_key["k-dns"]["cpus"]) == ("reserved", "0")
    assert by_key["k-web"]["requests"] == {"cpu_milli": 500, "memory_bytes": 1 << 20}
    assert by_key["k-a"]["qos"] == "Guaranteed" and by_key["k-a"]["namespace"] == "team"
    topo = doc["topology"]
    assert topo["isolated"] == "6-7"
    assert [[[c["cpus"] for c in n["cores"]] for n in p["nodes"]] for p in topo["packages"]] == \
        [[[[0, 1], [2, 3]]], [[[4, 5], [6, 7]]]]
    json.dumps(doc)  # JSON as it is


def test_controller_state_before_any_configuration_is_empty_and_io_free():
    ctl = Controller(EngineSettings(host_root="/nonexistent"), default_registry(), None, None,  # type: ignore[arg-type]
                     lambda *args: None)
    doc = ctl.state().to_document()
    assert (doc["policy"], doc["config"], doc["topology"], doc["pools"], doc["containers"]) == \
        ("none", None, None, {}, [])
    assert "Machine: not known" in command.render(doc, "text")


def test_text_marks_each_cpu_with_its_holder_and_lists_every_container():
    out = command.render(document(), "text")
    assert "\x1b[" not in out  # plain unless colour is asked for
    lines = out.splitlines()
    assert lines[0] == "Policy static-plus, configuration from /etc/cri-resmgr/config.yaml"
    assert "    Core 0: CPU 0 reserved  CPU 1 a:c" in lines  # the clashing name "c" is told apart by pod
    assert "    Core 1: CPU 2 x<&>y  CPU 3 shared" in lines
    assert "    Core 1: CPU 6 postgres  CPU 7 postgres" in lines
    assert "Pools: exclusive 1-2,6-7, isolated 6-7, reserved 0, shared 3-5" in lines
    table = lines[lines.index("") + 1:]
    assert table[0].split() == list(view_headers())
    assert [row.split()[0] for row in table[1:]] == ["coredns", "postgres", "nginx", "a:c", "b:c", "x<&>y"]
    assert table[1].split()[1:9] == ["kube-system", "coredns-x", "coredns", "Burstable", "100m", "reserved", "-",
                                     "0"]


def test_text_colour_on_request_only():
    coloured = command.render(document(), "text", colour=True)
    assert "\x1b[1;" in coloured and "\x1b[0m" in coloured
    plain = coloured
    for code in ("\x1b[0m", "\x1b[1;31m", "\x1b[1;33m", "\x1b[1;35m", "\x1b[32m", "\x1b[33m"):
        plain = plain.replace(code, "")
    assert plain == command.render(document(), "text")  # colour adds nothing else


def test_idle_and_shared_reserved_marks():
    doc = document()
    doc["pools"] = {"shared": "0-3", "reserved": "0"}
    for c in doc["containers"]:
        c["exclusive_cpus"] = ""
    cells = {c.cpu: c.label for _, nodes in view.build(doc).machine for _, cores in nodes for _, cs in cores
             for c in cs}
    assert cells == {0: "shared/reserved", 1: "shared", 2: "shared", 3: "shared", 4: "idle", 5: "idle",
                     6: "idle", 7: "idle"}


def test_json_is_the_document():
    doc = document()
    assert json.loads(command.render(doc, "json")) == doc


def test_svg_parses_and_names_every_container_and_cpu():
    root = ET.fromstring(command.render(document(), "svg"))
    assert root.tag == SVG + "svg"
    texts = [t.text for t in root.iter(SVG + "text")]
    for short in ("coredns", "postgres", "nginx", "a:c", "b:c", "x<&>y"):
        assert short in texts, short
    for cpu in range(8):
        assert f"CPU {cpu}" in texts
    titles = {t.text.split("; ")[0] for t in root.iter(SVG + "title")}
    assert "CPU 6: postgres" in titles and "CPU 3: shared" in titles
    # The shared pool's containers are visible on its CPUs: named in the title, counted in the cell.
    assert "CPU 3: shared; shared by nginx, b:c, x<&>y" in {t.text for t in root.iter(SVG + "title")}
    assert "+3" in texts


def test_not_a_state_document_is_one_error_line():
    with pytest.raises(flags.CommandError, match="not a cri-resmgr state document"):
        command.render({"format": "something else"}, "text")


def test_file_argument_is_split_from_the_flags():
    cmd = command.COMMAND
    assert command.split_file(["-o", "svg", "out.svg"], cmd) == (["-o", "svg"], "out.svg")
    assert command.split_file(["out.svg", "-address=:9"], cmd) == (["-address=:9"], "out.svg")
    assert command.split_file(["-o", "json"], cmd) == (["-o", "json"], None)
    args, file = command.split_file(["a", "b"], cmd)
    assert file == "a"
    with pytest.raises(flags.UsageError, match="unexpected extra argument"):
        cmd.parse(args)


def view_headers() -> tuple[str, ...]:
    from cri_resmgr.status.text import HEADERS
    return HEADERS
