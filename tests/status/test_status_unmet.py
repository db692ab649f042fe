"""`cri-resmgr status` marks and counts the requests not met (issue 38): a Guaranteed container
holding fewer exclusive CPUs than its policy gives when it can, in the /state JSON, the text
and the SVG; a container that shares CPUs by design is not marked."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from cri_resmgr.config import parse_document
from cri_resmgr.engine import snapshot
from cri_resmgr.engine.cache import Cache, ContainerRecord
from cri_resmgr.policy.api import QoS, Workload
from cri_resmgr.policy.balloons import BalloonsPolicy
from cri_resmgr.policy.context import build_context
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.policy.static import StaticPolicy
from cri_resmgr.policy.topology_aware.policy import TopologyAwarePolicy
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.status import svg, text, view

SVG = "{http://www.w3.org/2000/svg}"


def _state(policy, topo, containers) -> dict:
    cache = Cache(None)
    for key, qos, milli in containers:
        w = Workload(key=key, namespace="default", pod=f"pod-{key}", name="c", qos=qos, cpu_request=milli,
                     cpu_limit=milli if qos is QoS.GUARANTEED else None, memory_request=1 << 20)
        cache.add_container(ContainerRecord(key=key, pod_id=f"pod-{key}", name="c", workload=w, id=f"{key}-0123456789ab",
                                            state="running"))
        policy.allocate(w)
    config = parse_document("policy:\n  Active: static\n", "/etc/cri-resmgr/config.yaml", default_registry().names())
    return snapshot.take(policy.name, policy, cache, snapshot.summarise(topo), config, dry_run=False).to_document()


def _static_doc() -> dict:
    """4 CPUs: a 3-CPU container takes what static can give; a 1-CPU one gets none (the shared
    pool keeps its last CPU); a BestEffort one asks for none."""
    topo = topology_of("1s/4c/1t")
    return _state(StaticPolicy(build_context(topo)), topo,
                  [("big", QoS.GUARANTEED, 3000), ("one", QoS.GUARANTEED, 1000), ("be", QoS.BESTEFFORT, 0)])


def test_the_state_document_marks_and_counts_them():
    doc = _static_doc()
    by_pod = {c["pod"]: c for c in doc["containers"]}
    assert doc["unmet_requests"] == 1
    assert (by_pod["pod-one"]["exclusive_wanted"], by_pod["pod-one"]["request_unmet"]) == (1, True)
    assert (by_pod["pod-big"]["exclusive_wanted"], by_pod["pod-big"]["request_unmet"]) == (3, False)
    assert (by_pod["pod-be"]["exclusive_wanted"], by_pod["pod-be"]["request_unmet"]) == (0, False)


def test_text_marks_the_row_and_counts_them():
    out = text.render(view.build(_static_doc()))
    row = next(line for line in out.splitlines() if line.startswith("pod-one:c"))
    assert "Guaranteed" in row and "- (wants 1)" in row
    assert "(wants" not in next(line for line in out.splitlines() if line.startswith("pod-big:c"))
    assert "Requests not met: 1 container holds fewer exclusive CPUs than asked for: pod-one:c (0 of 1)" in out


def test_svg_marks_the_row_and_counts_them():
    root = ET.fromstring(svg.render(view.build(_static_doc())))
    red = [t.text for t in root.iter(f"{SVG}text") if t.get("fill") == svg.UNMET_FILL]
    assert "pod-one:c" in red and "- (wants 1)" in red and "pod-big:c" not in red
    assert any((t or "").startswith("Requests not met: 1 container") for t in red)


def test_none_unmet_is_no_line_and_old_documents_read():
    doc = _static_doc()
    for c in doc["containers"]:  # a document from before the fields
        del c["exclusive_wanted"], c["request_unmet"]
    del doc["unmet_requests"]
    out = text.render(view.build(doc))
    assert "Requests not met" not in out and "(wants" not in out


def test_balloons_mark_a_dedicated_container_short_of_its_request_not_a_shared_one():
    """Under MaxCPUs 8 a dedicated 12-CPU container holds 8: a request not met (the cap its
    reason); a Guaranteed container of a type that shares its balloon is not marked."""
    topo = topology_of("2s/4n/8c/2t")
    types = [{"Name": "big", "Namespaces": ["default"], "MaxCPUs": 8, "PreferNewBalloons": True}]
    doc = _state(BalloonsPolicy(build_context(topo, options={"BalloonTypes": types})), topo,
                 [("g12", QoS.GUARANTEED, 12000)])
    (c,) = doc["containers"]
    assert (c["exclusive_wanted"], len(c["exclusive_cpus"].split("-")), c["request_unmet"]) == (12, 2, True)
    shared = [{"Name": "pack", "Namespaces": ["default"]}]
    doc = _state(BalloonsPolicy(build_context(topo, options={"BalloonTypes": shared})), topo,
                 [("g2", QoS.GUARANTEED, 2000)])
    assert doc["unmet_requests"] == 0 and doc["containers"][0]["exclusive_wanted"] == 0


def test_topology_aware_marks_one_no_pool_could_give():
    topo = topology_of("1s/4c/1t")
    doc = _state(TopologyAwarePolicy(build_context(topo)), topo,
                 [("big", QoS.GUARANTEED, 3000), ("one", QoS.GUARANTEED, 1000)])
    assert doc["unmet_requests"] == 1
    assert [c["pod"] for c in doc["containers"] if c["request_unmet"]] == ["pod-one"]
