"""The plugin's view of the runtime before a Synchronize is partial (containerd before
1.7.26 never sends one to a plugin it launched): in-process, the engine on `NriRuntime`
restores the saved state at Configure and judges nothing gone from a partial listing,
holds the updates of containers it has not heard of, and reconciles fully once a
Synchronize comes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.config import Settings
from cri_resmgr.engine.controller import Controller
from cri_resmgr.nri import app
from cri_resmgr.nri.hooks import Hooks
from cri_resmgr.nri.view import NriRuntime
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.topology.cpuset import CPUSet
from tests.nri.plugin_process import STATIC
from tests.nri.runtime_double import container, guaranteed, pod


class Plugin:
    """What app.run wires, minus the connection: the runtime's calls are made directly."""

    def __init__(self, workdir: Path, grace: float = 3600):
        config = workdir / "config.yaml"
        config.write_text(STATIC)
        settings = Settings(policy="static", force_config=str(config), state_dir=str(workdir / "state"),
                            host_root=str(workdir / "host"), config_socket="-", agent_socket="-",
                            agent_export_interval=0, metrics_address="", reconcile_period=0)
        self.runtime = NriRuntime("test")
        self.sent: list[api.ContainerUpdate] = []
        self.hooks = Hooks(self.runtime, lambda: self.controller.flush())
        self.controller = Controller(settings.engine(), default_registry(), self.hooks, self.runtime,
                                     lambda *a: None)  # type: ignore[arg-type,return-value]
        self.sync = app.Synchronizer(self.controller, self.runtime, lambda why: None, grace=grace)
        self.hooks.on_configure, self.hooks.on_synchronize = self.sync.configured, self.sync
        self.hooks.on_unknown = self.sync.adopt_soon

        async def send(updates: list[api.ContainerUpdate]) -> list[api.ContainerUpdate]:
            self.sent.extend(updates)
            return []
        self.runtime.connected(send)

    async def configure(self) -> None:
        await self.hooks.configure(api.ConfigureRequest(request_timeout=10_000))

    async def synchronize(self, pods: list[api.PodSandbox], containers: list[api.Container]) -> dict[str, str]:
        reply = await self.hooks.synchronize(api.SynchronizeRequest(pods=pods, containers=containers))
        return {u.container_id: u.linux.resources.cpu.cpus for u in reply.update}

    async def close(self) -> None:
        self.sync.cancel()
        await self.controller.close()


def test_restart_without_synchronize_keeps_the_saved_state_and_a_later_one_reconciles(workdir: Path) -> None:
    pods = [pod("p1", "burstable"), pod("g", "guaranteed")]
    a1, g1 = container("a1", "p1", milli_cpu=500), guaranteed("g1", "g", 2)

    async def scenario() -> None:
        first = Plugin(workdir)
        await first.configure()
        placed = await first.synchronize(pods, [a1, g1])
        exclusive = CPUSet.parse(placed["g1"])
        assert len(exclusive) == 2 and CPUSet.parse(placed["a1"]) == CPUSet.parse("0-7") - exclusive
        await first.close()

        second = Plugin(workdir)
        await second.configure()  # no Synchronize yet: the view knows no container
        assert not second.runtime.listing_complete
        assert await second.controller.reconcile() == {"gone": 0, "adopted": 0, "resent": 0}
        assigned = second.controller.active_policy().assignments()  # type: ignore[union-attr]
        assert next(a.exclusive for k, a in assigned.items() if k.startswith("g:")) == exclusive
        await second.controller.flush()
        assert second.sent == []  # the restore's updates are held: the view has not heard of a1, g1

        # The Synchronize comes: g1 went meanwhile, so its CPUs return to a1, in the reply.
        placed = await second.synchronize(pods, [a1])
        assert CPUSet.parse(placed["a1"]) == CPUSet.parse("0-7")
        assert "g1" not in placed and second.sent == []
        assert not any(k.startswith("g:") for k in second.controller.active_policy().assignments())  # type: ignore[union-attr]
        await second.close()

    asyncio.run(scenario())


def test_a_synchronize_during_a_slow_activation_waits_for_it_and_applies_once(workdir: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="cri_resmgr.nri.app")

    async def scenario() -> None:
        plugin = Plugin(workdir)
        applied = []
        apply = plugin.controller.apply

        async def slow_apply(config):  # type: ignore[no-untyped-def]
            applied.append(config.source)
            await asyncio.sleep(0.2)  # longer than Configure may take (75% of 10 ms)
            await apply(config)

        plugin.controller.apply = slow_apply  # type: ignore[method-assign]
        await plugin.hooks.configure(api.ConfigureRequest(request_timeout=10))
        assert plugin.controller.config is None  # Configure answered, the activation goes on
        plugin.hooks.request_timeout = 10.0  # the Synchronize may wait for it
        placed = await plugin.synchronize([pod("g", "guaranteed")], [guaranteed("g1", "g", 2)])
        assert len(CPUSet.parse(placed["g1"])) == 2  # after the activation it waited for
        assert len(applied) == 1
        await plugin.close()

    asyncio.run(scenario())
    assert sum("active (" in r.getMessage() for r in caplog.records) == 1


def test_after_the_grace_without_synchronize_updates_of_unheard_containers_are_sent(workdir: Path) -> None:
    """No Synchronize ever (a plugin containerd 1.7 launched): once the grace is over, an
    update of a container the view has not heard of (it ran before the plugin) is sent
    with UpdateContainers like the held ones were, not held for a Synchronize that will
    not come: else it would keep running on CPUs a new container was just given."""
    pods = [pod("p1", "burstable"), pod("g", "guaranteed")]
    a1, g1 = container("a1", "p1", milli_cpu=500), guaranteed("g1", "g", 2)

    async def scenario() -> None:
        first = Plugin(workdir)
        await first.configure()
        await first.synchronize(pods, [a1, g1])
        await first.close()

        second = Plugin(workdir, grace=0.05)
        await second.configure()
        for _ in range(100):
            if not second.runtime._deferred and second.sent:
                break
            await asyncio.sleep(0.02)
        second.sent.clear()  # what the grace released: the restore's updates
        reply = await second.hooks.create_container(api.CreateContainerRequest(
            pod=pods[1], container=guaranteed("g2", "g", 2)))
        mine = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(mine) == 2
        await second.controller.flush()
        await second.runtime.drained()  # UpdateContainers goes out from its own task
        told = {u.container_id: CPUSet.parse(u.linux.resources.cpu.cpus) for u in [*second.sent, *reply.update]}
        assert "a1" in told and not (told["a1"] & mine)  # a1 left g2's CPUs
        await second.close()

    asyncio.run(scenario())
