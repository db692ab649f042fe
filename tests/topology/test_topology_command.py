"""`cri-resmgr topology [-host-root DIR] [-o text|json]`, called in-process."""

import json

import pytest

from cri_resmgr import cli
from tests.harness import sysfs_classes as classes
from tests.harness.sysfs_classes import write_machine


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["topology", *args])
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def test_text_and_json(tmp_path, capsys):
    write_machine(tmp_path, classes.hybrid())
    code, out, _ = _run(capsys, "-host-root", str(tmp_path))
    assert code == 0 and out.startswith("Machine: 24 online CPUs (0-23), 16 cores")
    assert "(E-core, 2.4/3.8 GHz, cluster 16): CPU 16" in out
    code, out, _ = _run(capsys, f"--host-root={tmp_path}", "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["cpus"][16]["kind"] == "efficiency"


def test_unreadable_root_is_one_line_and_exit_1(tmp_path, capsys):
    code, out, err = _run(capsys, "-host-root", str(tmp_path / "none"))
    assert code == 1 and out == ""
    assert err.startswith("cri-resmgr topology: error: host root") and err.count("\n") == 1


def test_bad_output_format_is_a_usage_error(capsys):
    code, _, err = _run(capsys, "-o", "xml")
    assert code == 2 and "invalid value for -o" in err
