"""In-place resize through the NRI plugin on real containerd 1.7.24 and 2.1.9: the CRI
UpdateContainerResources kubelet sends on a resize reaches the plugin as UpdateContainer;
checked in the real cgroup files. This machine has 2 CPUs: reserve 1, give 1 exclusive."""

from __future__ import annotations

import grpc
import pytest

from tests.harness.podspec import LinuxResources, milli_cpu_to_quota, milli_cpu_to_shares
from tests.nri.plugin_process import STATIC, PluginProcess
from tests.nri.test_real_runtimes import ALL, EXCLUSIVE, RESERVED, besteffort, guaranteed, wait_cpuset, wait_for
from tests.nri.test_real_runtimes import kubelet_on as kubelet_on  # noqa: F401 (fixture)
from tests.nri.test_real_runtimes import plugin_dir as plugin_dir  # noqa: F401 (fixture)
from tests.nri.test_real_runtimes import pytestmark as pytestmark  # noqa: F401 (2 CPUs)


def resized(milli: int) -> LinuxResources:
    return LinuxResources(cpu_shares=milli_cpu_to_shares(milli), cpu_quota=milli_cpu_to_quota(milli),
                          cpu_period=100000, memory_limit_in_bytes=32 << 20, oom_score_adj=-997)


def test_resize_through_the_plugin_on_a_real_runtime(nri_containerd, kubelet_on, plugin_dir):  # noqa: F811
    k = kubelet_on
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), "/", STATIC).start()
    try:
        wait_for("the plugin's policy", lambda: "policy static active" in plugin.log(), plugin.log)
        be = k.start_pod(besteffort("rz-be")).container_ids["c"]
        g = k.start_pod(guaranteed("rz-g", cpu="1500m")).container_ids["c"]
        wait_cpuset(k, g, ALL, log=plugin.log)

        k.update_container_resources(g, resized(1000))
        wait_cpuset(k, g, EXCLUSIVE, log=plugin.log)
        wait_cpuset(k, be, RESERVED, log=plugin.log)

        with pytest.raises(grpc.RpcError) as e:  # 2 CPUs: one is reserved
            k.update_container_resources(g, resized(2000))
        assert "cannot resize default/rz-g:c" in (e.value.details() or "")
        wait_cpuset(k, g, EXCLUSIVE, log=plugin.log)  # nothing moved
        wait_cpuset(k, be, RESERVED, log=plugin.log)

        k.update_container_resources(g, resized(500))
        wait_cpuset(k, g, ALL, log=plugin.log)
        wait_cpuset(k, be, ALL, log=plugin.log)
    finally:
        plugin.stop()
