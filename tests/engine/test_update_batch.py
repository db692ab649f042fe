"""The one INFO line for the updates a decision sends to other containers."""

from cri_resmgr.engine.describe import UpdateBatch
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
