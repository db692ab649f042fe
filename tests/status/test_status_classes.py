"""`cri-resmgr status` shows each container's block I/O and RDT classes when any has one."""

from __future__ import annotations

from cri_resmgr.status import command
from tests.status.statekit import document


def test_class_columns_only_when_a_class_is_given():
    doc = document()
    assert "BLOCKIO" not in command.render(doc, "text")
    doc["containers"][0]["blockio_class"] = "slowwriter"
    doc["containers"][1]["rdt_class"] = "guaranteed"
    lines = command.render(doc, "text").splitlines()
    table = lines[lines.index("") + 1:]
    header = table[0].split()
    assert header[-3:] == ["BLOCKIO", "RDT", "ID"]
    rows = {row.split()[0]: row.split() for row in table[1:]}
    first, second = doc["containers"][0], doc["containers"][1]
    assert [r[-3:-1] for r in rows.values() if r[-1] == (first["id"] or "creating")[:12]] == [["slowwriter", "-"]]
    assert [r[-3:-1] for r in rows.values() if r[-1] == (second["id"] or "creating")[:12]] == [["-", "guaranteed"]]
