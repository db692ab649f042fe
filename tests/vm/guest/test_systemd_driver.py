"""The systemd cgroup driver on cgroup v2: pods' cgroups are slices
(crirmvmXXXX.slice/crirmvmXXXX-besteffort.slice/...-podUID.slice), containers scopes made by
systemd for runc. The relay (containerd 1.6 and 2.1.9) and the plugin (2.1.9) under the static
policy find each container's cgroup there: exclusive CPUs and memory nodes in the kernel's
files, the shared container updated, a cpuset changed by hand put back by the reconcile."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri_resmgr.topology.cpuset import CPUSet
from tests.vm.guest import cgv2
from tests.vm.guest.conftest import kubelet_for
from tests.vm.guest.frontends import COMBINATIONS, FrontEnd
from tests.vm.guest.test_policies import CONFIGS, besteffort, guaranteed, wait_exclusive

pytestmark = pytest.mark.topologies("4node")


@pytest.mark.parametrize(("kind", "version"), COMBINATIONS, ids=[f"{k}-{v}" for k, v in COMBINATIONS])
def test_placement_and_reconcile_in_systemd_slices(make_runtime, workdir: Path, kind: str, version: str) -> None:
    runtime = make_runtime(version, "systemd")
    front = FrontEnd(kind, runtime, workdir, CONFIGS["static"], ("-reconcile-period", "3")).start()
    k = kubelet_for(front.address, runtime)
    try:
        shared = k.start_pod(besteffort("shared")).container_ids["c"]
        g = k.start_pod(guaranteed("g", cpu="2")).container_ids["c"]
        p = wait_exclusive(k, g, 2)
        slice_name = runtime.owned_cgroup_roots[0].strip("/")
        assert p.cgroup.name.endswith(".scope") and g in p.cgroup.name, p
        assert p.cgroup.parent.name.endswith(".slice") and slice_name in p.cgroup.parts, p
        ps = cgv2.wait_placement(k, shared, cgv2.online_cpus() - p.cpus)

        (ps.cgroup / "cpuset.cpus").write_text("5\n")
        assert cgv2.placement(k, shared).cpus == CPUSet([5])
        cgv2.wait_placement(k, shared, ps.cpus)  # the reconcile put it back
    finally:
        try:
            k.delete_all_pods()
        finally:
            k.close()
            front.stop()
