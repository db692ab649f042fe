"""The plugin's registration on real containerd 1.7.24 and 2.1.9, which have no
UpdatePodSandbox (NRI before v0.10: 2.1.9 closes a plugin whose event mask asks for it,
"invalid plugin events"): the plugin does not ask, says so, and is configured and
synchronized; a container that takes its size from its pod's pod-level resources gets
it (the real cgroup cpuset). 2 CPUs: 1 reserved, 1 exclusive."""

from __future__ import annotations

from tests.harness.podspec import ContainerSpec, PodSpec
from tests.nri.plugin_process import STATIC, PluginProcess
from tests.nri.test_real_runtimes import EXCLUSIVE, RESERVED, besteffort, wait_cpuset, wait_for
from tests.nri.test_real_runtimes import kubelet_on as kubelet_on  # noqa: F401 (fixture)
from tests.nri.test_real_runtimes import plugin_dir as plugin_dir  # noqa: F401 (fixture)
from tests.nri.test_real_runtimes import pytestmark as pytestmark  # noqa: F401 (2 CPUs)

MEM = "32Mi"


def test_the_runtime_keeps_the_plugin_and_a_pod_sized_container_gets_the_pods_cpu(
        nri_containerd, kubelet_on, plugin_dir):  # noqa: F811
    k = kubelet_on
    plugin = PluginProcess(plugin_dir, str(nri_containerd.layout.nri_socket), "/", STATIC).start()
    try:
        wait_for("the plugin's Synchronize", lambda: "synchronizing with the runtime" in plugin.log(), plugin.log)
        assert "not subscribing to UpdatePodSandbox (pod-level resize)" in plugin.log()
        be = k.start_pod(besteffort("pr-be")).container_ids["c"]
        size = {"requests": {"cpu": "1", "memory": MEM}, "limits": {"cpu": "1", "memory": MEM}}
        c = k.start_pod(PodSpec(name="pr-p", containers=[ContainerSpec(name="c")], resources=size)).container_ids["c"]
        wait_cpuset(k, c, EXCLUSIVE, log=plugin.log)  # the pod's CPU, exclusive
        wait_cpuset(k, be, RESERVED, log=plugin.log)
        assert plugin.log().count("registered with the runtime") == 1  # never closed for its event mask
        assert "lost the NRI connection" not in plugin.log()
    finally:
        plugin.stop()
