"""`cri-resmgr topology` output: the text picture and the JSON document."""

import json

from cri_resmgr.topology import discover
from cri_resmgr.topology.render import render_json, render_text, to_document
from tests.harness import sysfs_classes as classes
from tests.harness.sysfs import fake_topology, generate
from tests.harness.sysfs_classes import write_machine


def test_text_nests_packages_dies_nodes_l3_cores_threads(tmp_path):
    write_machine(tmp_path, classes.l3_per_ccx())
    text = render_text(discover(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("Machine: 64 online CPUs (0-63), 32 cores, 1 package")
    assert lines[1:4] == ["  Package 0 (64 CPUs)", "    Die 0 (64 CPUs)",
                          "      NUMANode 0 (DRAM 16.0 GiB, CPUs 0-63)"]
    assert lines[4] == "        L3 0-3,32-35 (32.0 MiB)"
    assert lines[5] == "          Core 0: CPU 0, CPU 32"
    assert text.count("L3 ") == 8 and text.count("Core ") == 32


def test_text_marks_isolated_offline_and_memory_only():
    topo = fake_topology(sockets=2, cores_per_die=2, threads_per_core=2, offline=[3], isolated=[1],
                         memory_only_nodes=1)
    text = render_text(topo)
    assert "CPU 1 (isolated)" in text and "Offline CPUs: 3" in text
    assert "NUMANode 2 (PMEM/CXL 64.0 GiB, nearest CPUs in node 0 at distance 17)" in text
    assert "Distances:" in text and "isolated 1" in text.splitlines()[0]


def test_text_of_nodes_spanning_packages_and_unknown_ids(tmp_path):
    write_machine(tmp_path, classes.multi_package_nodes())
    text = render_text(discover(tmp_path))
    assert "NUMANode 0 (DRAM 16.0 GiB, CPUs 0-15, also in package 1)" in text
    assert "NUMANode 0 (DRAM 16.0 GiB, CPUs 0-15, also in package 0)" in text


def test_text_of_unknown_package_and_dies_and_warnings(tmp_path):
    write_machine(tmp_path, classes.power_unknown_package())
    text = render_text(discover(tmp_path))
    assert "  Package ? (64 CPUs)" in text and "Die" not in text


def test_text_lists_warnings(tmp_path):
    write_machine(tmp_path, classes.odd_distances())
    text = render_text(discover(tmp_path))
    assert "Warnings (left out of the model):" in text
    assert "node offline" in text


def test_json_is_plain_data_with_null_for_unknown(tmp_path):
    write_machine(tmp_path, classes.old_kernel_amd())
    topo = discover(tmp_path)
    doc = json.loads(render_json(topo))
    assert doc == json.loads(json.dumps(to_document(topo)))
    assert doc["online"] == "0-127" and len(doc["cpus"]) == 128
    cpu9 = doc["cpus"][9]
    assert cpu9["die"] is None and cpu9["package"] == 0 and cpu9["siblings"] == "9,73" and cpu9["l3"] == 8
    assert doc["groups"]["die"] == [] and len(doc["groups"]["l3"]) == 16
    assert doc["nodes"][1]["distances"]["0"] == 16 and doc["nodes"][1]["kind"] == "dram"
    assert doc["warnings"] == []


def test_an_l3_spanning_the_socket_shows_as_one_cache_under_each_node(tmp_path):
    """2 sockets of 2 NUMA nodes each, one L3 per socket (issue 33.3): under each node the
    text shows the socket's cache, as the kernel and -o json do, not the node's part as its own."""
    generate(tmp_path, sockets=2, cores_per_die=4, threads_per_core=2, numa_per_socket=2, l3="package")
    topo = discover(tmp_path)
    assert to_document(topo)["groups"]["l3"] == ["0-7", "8-15"]  # type: ignore[index]
    lines = render_text(topo).splitlines()
    l3_lines = [line.strip() for line in lines if line.strip().startswith("L3 ")]
    assert l3_lines == ["L3 0-7 (32.0 MiB, shared by NUMA nodes 0-1)"] * 2 + \
        ["L3 8-15 (32.0 MiB, shared by NUMA nodes 2-3)"] * 2
    node1 = lines.index(next(line for line in lines if line.strip().startswith("NUMANode 1 ")))
    assert [line.strip() for line in lines[node1 + 1:node1 + 4]] == [
        "L3 0-7 (32.0 MiB, shared by NUMA nodes 0-1)", "Core 2: CPU 4, CPU 5", "Core 3: CPU 6, CPU 7"]


def test_an_l3_of_the_node_alone_says_nothing_more(tmp_path):
    generate(tmp_path, sockets=1, cores_per_die=4, threads_per_core=1, numa_per_socket=2, l3="node")
    l3_lines = [line.strip() for line in render_text(discover(tmp_path)).splitlines() if "L3 " in line]
    assert l3_lines == ["L3 0-1 (32.0 MiB)", "L3 2-3 (32.0 MiB)"]
