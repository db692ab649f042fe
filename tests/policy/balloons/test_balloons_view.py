"""What an operator sees of the balloons: the pools in the engine's snapshot (/state),
`cri-resmgr status` text, and the pool metrics, from a real policy and cache."""

from __future__ import annotations

from balloons_testkit import annotated, policy, wl

from cri_resmgr.config import parse_document
from cri_resmgr.engine import snapshot
from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.engine.usage import node_usage
from cri_resmgr.frontend.metrics import EngineCollector
from cri_resmgr.status import command, view
from tests.harness.sysfs import fake_topology

CONFIG = "policy:\n  Active: balloons\n"


def _state():
    topo = fake_topology(sockets=2, cores_per_die=2, threads_per_core=2)  # CPUs 0-7
    p = policy(topo, [{"Name": "dataplane", "Namespaces": ["dpdk"], "MinCPUs": 2, "MinBalloons": 1},
                      {"Name": "batch", "ShareIdleCPUsInSame": "system"}], reserved="cpuset:0")
    cache = Cache(None)
    for w in (wl("k-upf", 1500, "dpdk"), annotated("k-job", "batch", 1000), wl("k-web", 0, "web")):
        cache.add_container(ContainerRecord(key=w.key, pod_id=f"pod-{w.key}", name=w.name, workload=w,
                                            id=f"{w.key}-0123456789abcdef", state="running"))
        p.allocate(w)
    config = parse_document(CONFIG, "/etc/cri-resmgr/config.yaml", ["none", "balloons"])
    return topo, p, cache, snapshot.take("balloons", p, cache, snapshot.summarise(topo), config, dry_run=False)


def test_state_document_has_a_row_per_balloon():
    _, p, _, state = _state()
    doc = state.to_document()
    table = {row["name"]: row for row in doc["pool_table"]}
    assert set(table) == {"reserved[0]", "dataplane[0]", "default[0]", "batch[0]"}
    dp = table["dataplane[0]"]
    assert (dp["kind"], dp["containers"], dp["requested_milli"], dp["cpus"]) == \
        ("dataplane", 1, 1500, str(p.balloon_of("k-upf").cpus))
    assert table["batch[0]"]["shared_cpus"] == str(p.resources("k-job").cpuset_cpus)  # lent CPUs included
    assert doc["pools"]["dataplane[0]"] == dp["cpus"]
    by_id = {c["id"][:5]: c for c in doc["containers"]}
    assert by_id["k-upf"]["pool"] == "dataplane[0]"


def test_status_text_marks_cpus_with_their_balloon_and_lists_the_pools():
    _, p, _, state = _state()
    out = command.render(state.to_document(), "text")
    dp_cpu = p.balloon_of("k-upf").cpus.min()
    assert f"CPU {dp_cpu} dataplane[0]" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("POOL "))
    assert lines[header].split() == ["POOL", "KIND", "PARENT", "CPUS", "RUNS", "ON", "MEMS", "CONTAINERS", "REQUESTED"]
    rows = {line.split()[0]: line.split() for line in lines[header + 1:] if line.strip() and "[" in line.split()[0]}
    assert rows["dataplane[0]"][1:3] == ["dataplane", "-"] and rows["dataplane[0]"][-2:] == ["1", "1500m"]
    assert rows["batch[0]"][-2:] == ["1", "1"]


def test_simple_policies_show_no_pool_table():
    from tests.status.statekit import document

    assert view.build(document()).pool_table == ()
    assert not any(line.startswith("POOL ") for line in command.render(document(), "text").splitlines())


def test_pool_metrics_per_balloon():
    topo, p, cache, _ = _state()
    usage = node_usage("balloons", p, topo, cache)

    collector = EngineCollector.__new__(EngineCollector)
    families = {m.name: m for m in collector._usage_families(usage)}
    info = {s.labels["pool"]: s.labels for s in families["cri_resmgr_pool_info"].samples}
    assert info["dataplane[0]"]["kind"] == "dataplane" and info["dataplane[0]"]["mems"]
    requested = {s.labels["pool"]: s.value for s in families["cri_resmgr_pool_requested_cpus"].samples}
    assert requested == {"reserved[0]": 0, "dataplane[0]": 1.5, "default[0]": 0, "batch[0]": 1.0}
    members = {s.labels["pool"]: s.value for s in families["cri_resmgr_pool_member_containers"].samples}
    assert members["batch[0]"] == 1 and members["default[0]"] == 1
    cpus = {s.labels["pool"]: s.value for s in families["cri_resmgr_pool_cpus"].samples}
    assert cpus["dataplane[0]"] == len(p.balloon_of("k-upf").cpus)


def test_svg_gives_each_balloon_its_colour_a_legend_and_the_pool_table():
    """Issue 29: balloons were all drawn white; the picture gets a colour per pool or balloon, a
    legend naming them, and the pool table under the containers."""
    import xml.etree.ElementTree as ET

    svg_ns = "{http://www.w3.org/2000/svg}"
    _, _, _, state = _state()
    root = ET.fromstring(command.render(state.to_document(), "svg"))
    fill_of: dict[str, str] = {}
    for g in root.iter(svg_ns + "g"):
        title = g.find(svg_ns + "title").text  # "CPU 3: dataplane[0]; shared by k-upf"
        fill_of[title.split(": ", 1)[1].split("; ")[0]] = g.find(svg_ns + "rect").get("fill")
    titles = [g.find(svg_ns + "title").text for g in root.iter(svg_ns + "g")]
    assert any(t.endswith("batch[0]; shared by k-job") for t in titles), titles  # who runs there, visible
    balloon_fills = {label: fill for label, fill in fill_of.items() if "[" in label}
    assert len(balloon_fills) >= 2, fill_of
    assert len(set(balloon_fills.values())) == len(balloon_fills), balloon_fills  # one colour each
    assert "#ffffff" not in balloon_fills.values()
    texts = [t.text for t in root.iter(svg_ns + "text")]
    for label in balloon_fills:  # each named in the legend, beside its swatch
        assert texts.count(label) >= 1, label
    assert "POOL" in texts and "REQUESTED" in texts and "dataplane" in texts  # the pool table
