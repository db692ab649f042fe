"""How the plugin's updates of other containers reach the runtime (issue 34 B and 4),
through the real `cri-resmgr-nri` process and the in-process runtime double, which
keeps a container's spec and its task's cgroup apart as containerd does and records
every UpdateContainers that arrives while one of its calls to the plugin is in flight.

The static policy on a generated 8-CPU machine, 1 CPU reserved; the periodic reconcile
is off, so nothing but the delivery under test can put a cpuset right."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.nri import ttrpc
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod
from tests.nri.test_plugin_process import run
from tests.nri.test_resize_nri import sized

ONLINE = CPUSet.parse("0-7")


async def _until(what: Callable[[], str], ok: Callable[[], bool], plugin: PluginProcess,
                 timeout: float = 20.0) -> None:
    """Bounded waiting for what the plugin sends on its own (UpdateContainers)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not ok():
        if loop.time() > deadline:
            raise AssertionError(f"{what()} within {timeout}s; plugin log:\n{plugin.log()[-3000:]}")
        await asyncio.sleep(0.02)


def test_a_shared_containers_update_decided_while_it_starts_reaches_its_cgroup(workdir: Path) -> None:
    """kubelet creates a BestEffort and a Guaranteed container together: the Guaranteed
    one's CreateContainer shrinks the BestEffort one while its task is made but not yet
    started. containerd applies that to the spec only (the task took the old cpuset):
    the update must be sent again once it has started."""
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        await double.run_pod(pod("be", "besteffort"))
        await double.run_pod(pod("g", "guaranteed"))
        hold, held = asyncio.Event(), asyncio.Event()
        starting = asyncio.ensure_future(double.create(container("be1", "be"), hold=hold, held=held))
        await held.wait()
        assert CPUSet.parse(double.real_cpus("be1")) == ONLINE  # its task, made from the spec
        reply = await double.create(guaranteed("g1", "g", 2))
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 2
        hold.set()
        await starting
        await _until(lambda: f"be1's cgroup still has {double.real_cpus('be1')} (spec {double.cpus('be1')})",
                     lambda: CPUSet.parse(double.real_cpus("be1")) == ONLINE - exclusive, plugin)
        assert CPUSet.parse(double.cpus("be1")) == ONLINE - exclusive
        assert double.overlaps == []

    plugin = run(workdir, scenario)
    assert "sending it now that it has started" in plugin.log()


def test_creates_made_together_leave_no_shared_container_on_an_exclusive_cpu(workdir: Path) -> None:
    """The two creates concurrently, as kubelet makes them for two pods started together."""
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        pairs = 3
        for i in range(pairs):
            await double.run_pod(pod(f"be{i}", "besteffort"))
            await double.run_pod(pod(f"g{i}", "guaranteed"))
            await asyncio.gather(double.create(container(f"be{i}c", f"be{i}")),
                                 double.create(guaranteed(f"g{i}c", f"g{i}", 1)))
        exclusive = CPUSet()
        for i in range(pairs):
            exclusive = exclusive | CPUSet.parse(double.real_cpus(f"g{i}c"))
        assert len(exclusive) == pairs
        for i in range(pairs):
            cid = f"be{i}c"
            await _until(lambda cid=cid: f"{cid}'s cgroup has {double.real_cpus(cid)}, the exclusive CPUs are "
                         f"{exclusive}", lambda cid=cid: not (CPUSet.parse(double.real_cpus(cid)) & exclusive),
                         plugin)
        # No check of `overlaps` here: with two creates in flight at once, the double's
        # next call may be on its way while the plugin sends what a start was owed.

    run(workdir, scenario)


def test_what_a_hook_without_updates_in_its_reply_frees_comes_after_its_reply(workdir: Path) -> None:
    """StopPodSandbox and RemoveContainer replies carry nothing: what releasing changes
    for the others goes in the next reply that can carry it, or with UpdateContainers,
    and never while the runtime waits for one of the plugin's replies (containerd before
    NRI v0.12.1 can deadlock on that, later ones hold the update until the hook ends)."""
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        await double.wait_ready()
        assert CPUSet.parse(double.cpus("a1")) == ONLINE

        # A pod stopped with its container running (no StopContainer first).
        await double.run_pod(pod("g", "guaranteed"))
        await double.create(guaranteed("g1", "g", 2))
        assert len(CPUSet.parse(double.cpus("a1"))) == 6
        await double.stop_pod("g")
        await _until(lambda: f"a1 still on {double.cpus('a1')}",
                     lambda: CPUSet.parse(double.cpus("a1")) == ONLINE, plugin)

        # A container created and removed without a start or a stop (kubelet gave up on it);
        # the next CreateContainer's reply carries what the removal freed.
        await double.run_pod(pod("h", "guaranteed"))
        h1 = guaranteed("h1", "h", 2)
        reply = await double.call("CreateContainer", api.CreateContainerRequest(pod=double.pods["h"], container=h1),
                                  api.CreateContainerResponse)
        assert isinstance(reply, api.CreateContainerResponse)
        double.containers["h1"] = h1
        double._apply_updates(reply.update)
        assert len(CPUSet.parse(double.cpus("a1"))) == 6
        await double.remove("h1")
        await double.run_pod(pod("b", "besteffort"))
        await double.create(container("b1", "b"))
        await _until(lambda: f"a1 still on {double.cpus('a1')}",
                     lambda: CPUSet.parse(double.cpus("a1")) == ONLINE, plugin)
        assert double.overlaps == []

    run(workdir, scenario)


def test_a_reply_carrying_an_update_the_runtime_refuses_fails_no_event(workdir: Path) -> None:
    """A shared container is being removed (kubelet's RemoveContainer: containerd marks it
    removing, then waits for the NRI lock the plugin's CreateContainer holds) when a
    Guaranteed container's create shrinks the shared CPUs: containerd refuses that
    container's update, and a refused update in a reply fails the event, here the
    Guaranteed container's creation, unless it is marked ignore_failure."""
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        await double.run_pod(pod("be", "besteffort"))
        await double.create(container("be1", "be"))
        await double.create(container("be2", "be"))
        double.removing.add("be1")
        await double.run_pod(pod("g", "guaranteed"))
        reply = await double.create(guaranteed("g1", "g", 2))  # raised before: be1's update failed it
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 2
        carried = {u.container_id: u for u in reply.update}
        assert set(carried) == {"be1", "be2"} and all(u.ignore_failure for u in carried.values())
        assert CPUSet.parse(double.cpus("be2")) == ONLINE - exclusive

    run(workdir, scenario)


def test_updates_taken_into_a_refused_resizes_reply_still_go_out(workdir: Path) -> None:
    """A hook takes the carried and queued updates of other containers into its reply
    (Delivery.take); a resize the policy refuses fails the runtime's call, which has no
    reply to carry them: they must still be sent (the reconcile is off here)."""
    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        await double.wait_ready()
        await double.run_pod(pod("b", "besteffort"))
        await double.create(container("be", "b"))
        await double.run_pod(pod("g", "guaranteed"))
        await double.create(guaranteed("g1", "g", 2))
        await double.run_pod(pod("h", "guaranteed"))
        await double.create(guaranteed("h1", "h", 2))
        shared = CPUSet.parse(double.cpus("be"))
        freed = CPUSet.parse(double.cpus("g1"))
        assert not shared & freed
        await double.stop_pod("g")  # what g1 frees is carried: this reply has no update list
        with pytest.raises(ttrpc.TtrpcError) as e:  # h1 to 8 CPUs: one is reserved
            await double.update("h1", sized(8000))
        assert e.value.code == ttrpc.Code.RESOURCE_EXHAUSTED
        await _until(lambda: f"be still on {double.cpus('be')}",
                     lambda: CPUSet.parse(double.cpus("be")) == shared | freed, plugin)

    run(workdir, scenario)
