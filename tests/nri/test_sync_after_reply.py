"""What a first start's Synchronize does after its reply (issue 37): each adopted
container's log line comes once the reply is written (`Delivery.after_reply`), and
nothing the reply says is lost by it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cri_resmgr.nri.delivery import Delivery
from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, guaranteed, pod
from tests.nri.test_plugin_process import run


def test_after_reply_runs_at_once_when_idle_else_once_the_last_reply_is_written() -> None:
    async def main() -> list[str]:
        d = Delivery()
        d.watcher()
        done: list[str] = []
        d.after_reply(lambda: done.append("idle"))
        d.call_began()
        d.call_began()
        d.after_reply(lambda: done.append("later"))
        d.call_answered()
        assert done == ["idle"]  # one call still in flight
        d.call_answered()
        d.after_reply(lambda: done.append("idle again"))
        return done

    assert asyncio.run(main()) == ["idle", "later", "idle again"]


def test_work_after_a_reply_that_fails_leaves_the_rest_to_run() -> None:
    async def main() -> list[str]:
        d = Delivery()
        d.watcher()
        done: list[str] = []
        d.call_began()
        d.after_reply(lambda: 1 / 0)  # type: ignore[func-returns-value]
        d.after_reply(lambda: done.append("ran"))
        d.call_answered()
        return done

    assert asyncio.run(main()) == ["ran"]


def test_each_adopted_containers_line_comes_after_the_synchronize_reply(workdir: Path) -> None:
    def prepare(double: RuntimeDouble) -> None:
        double.pods["pa"] = pod("pa", "besteffort")
        double.pods["pg"] = pod("pg", "guaranteed")
        double.containers["a1"] = container("a1", "pa")
        double.containers["g1"] = guaranteed("g1", "pg", 2)

    async def scenario(double: RuntimeDouble, plugin: PluginProcess) -> None:
        s = await double.wait_ready()
        assert s.synchronized is not None
        assert sorted(u.container_id for u in s.synchronized.update) == ["a1", "g1"]
        assert len(double.cpus("g1").split(",")) >= 1 and double.cpus("a1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while plugin.log().count("INFO cri_resmgr.engine.resmgr: adopted ") < 2:
            assert loop.time() < deadline, plugin.log()
            await asyncio.sleep(0.02)

    plugin = run(workdir, scenario, prepare=prepare)
    lines = plugin.log().splitlines()
    replied = next(i for i, m in enumerate(lines) if "synchronized: 2 containers get new CPUs" in m)
    adopted = [i for i, m in enumerate(lines) if "cri_resmgr.engine.resmgr: adopted " in m]
    assert len(adopted) == 2 and min(adopted) > replied, "\n".join(lines)
    assert any("adopted default/pod-pg:ctr-g1 (g1): exclusive CPUs 2-3" in m for m in lines), "\n".join(lines)
    # what it holds once the reconcile is done, not before the exclusive container shrank its pool
    assert any("adopted default/pod-pa:ctr-a1 (a1): shared CPUs 0-1,4-7" in m for m in lines), "\n".join(lines)
