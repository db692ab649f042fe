"""The one INFO line for the updates a decision sends to other containers."""

import logging

import pytest

from cri_resmgr.engine.describe import Placement, UpdateBatch, placement
from cri_resmgr.policy.api import Resources
from cri_resmgr.topology.cpuset import CPUSet


def test_names_a_few_per_cpuset_and_counts_the_rest():
    shared = Resources(CPUSet("0-3"), "0")
    batch = UpdateBatch("creating default/db:c")
    for i in range(998):
        batch.add(f"default/s{i}:c", shared)
    batch.add("default/m:c", Resources(CPUSet("0-3,8"), "0"))
    # An equal cpuset in another object is the same group in the line.
    batch.add("default/t:c", Resources(CPUSet("0-3"), "0"))
    assert batch.count == 1000
    assert batch.line() == ("updating 1000 containers after creating default/db:c: "
                            "cpuset 0-3 mems 0 for default/s0:c, default/s1:c, default/s2:c and 996 more; "
                            "cpuset 0-3,8 mems 0 for default/m:c")


def test_one_container_and_many_cpusets():
    batch = UpdateBatch("restoring the allocations")
    batch.add("a", Resources(CPUSet("1")))
    assert batch.line() == "updating 1 container after restoring the allocations: cpuset 1 mems - for a"
    for cpu in range(2, 8):
        batch.add(f"c{cpu}", Resources(CPUSet([cpu]), "0"))
    line = batch.line()
    assert line.count("cpuset ") == UpdateBatch.GROUPS and line.endswith("; 3 more cpusets"), line


class _Name:
    """A container name that counts how often its text is built."""

    built = 0

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        _Name.built += 1
        return self.text


@pytest.fixture
def log():
    logger = logging.getLogger("test.update_batch")
    yield logger
    logger.setLevel(logging.NOTSET)


def test_text_is_built_only_when_written_and_only_what_is_shown(log, caplog):
    _Name.built = 0
    batch = UpdateBatch("creating default/db:c")
    sets = [CPUSet(range(i, 4096, 3 + i)) for i in range(10)]
    for i in range(1000):
        batch.add(_Name(f"default/s{i}:c"), Resources(sets[i % 10], "0"))
    log.setLevel(logging.WARNING)
    log.info("%s", batch)  # INFO off: nothing formatted
    assert _Name.built == 0 and all(s._text is None for s in sets)
    line = batch.line()
    assert line.endswith("; 6 more cpusets") and line.count(" for ") == UpdateBatch.GROUPS
    assert _Name.built == UpdateBatch.NAMES * UpdateBatch.GROUPS
    assert [s._text is not None for s in sets] == [True] * UpdateBatch.GROUPS + [False] * 6
    log.setLevel(logging.INFO)
    log.info("%s", batch)
    assert caplog.messages == [line]


def test_placement_text_is_built_only_when_written(log, caplog):
    cpus = CPUSet(range(0, 4096, 2))
    log.setLevel(logging.WARNING)
    log.info("%s", Placement(None, Resources(cpus, "0")))
    assert cpus._text is None
    log.setLevel(logging.INFO)
    log.info("%s", Placement(None, Resources(cpus, "0")))
    assert caplog.messages == [placement(None, Resources(cpus, "0"))] and cpus._text is not None
