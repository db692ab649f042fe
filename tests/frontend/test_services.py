"""frontend/services.py's own order of undoing: what a task uses is closed after the task ended."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from cri_resmgr.config import Settings
from cri_resmgr.frontend.agent_client import AgentClient
from cri_resmgr.frontend.services import Services


class _Controller:
    policy_name = "none"

    def usage(self) -> None:
        return None


def test_the_agent_client_is_closed_after_the_node_export_task_ended(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Closed under a running export, the client's channel would fail a patch in flight (a
    warning at every stop) or be opened again by the task's next step."""
    seen: list[bool] = []  # at each close from outside the task: has the task ended?
    real = AgentClient.close

    async def close(self: AgentClient) -> None:
        current = asyncio.current_task()
        if current is None or current.get_name() != "node export":
            seen.append(all(t.done() for t in asyncio.all_tasks() if t.get_name() == "node export"))
        await real(self)

    monkeypatch.setattr(AgentClient, "close", close)

    async def go() -> None:
        settings = Settings(agent_socket=str(tmp_path / "agent.sock"), agent_export_interval=1.0,
                            state_dir=str(tmp_path / "state"))
        async with contextlib.AsyncExitStack() as stack:
            services = Services(stack, settings)
            services.export_node(_Controller())  # type: ignore[arg-type]
            for _ in range(3):  # the task runs its first step (no agent socket: nothing sent)
                await asyncio.sleep(0)
            running: Any = [t for t in asyncio.all_tasks() if t.get_name() == "node export"]
            assert running and not running[0].done()

    asyncio.run(go())
    assert seen == [True]
