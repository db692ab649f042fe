"""The last configuration tried and the last success (issue 29: a failed reload was only a
log line): kept by the controller, shown as metrics and in /state (`cri-resmgr status`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import generate_latest

from cri_resmgr.config import EngineSettings, parse_document
from cri_resmgr.engine.controller import Controller
from cri_resmgr.frontend import metrics
from cri_resmgr.policy.registry import default_registry
from cri_resmgr.status import command as status


class _Feed:
    def reconfigure(self, **changes) -> None:
        pass


def _scraped(controller: Controller) -> dict[str, float]:
    text = generate_latest(metrics.registry(controller)).decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("cri_resmgr_config_last_reload")}


def test_a_refused_configuration_is_a_metric_and_a_status_line_and_the_old_one_stays(tmp_path: Path) -> None:
    registry = default_registry()
    controller = Controller(EngineSettings(state_dir=str(tmp_path / "state")), registry, _Feed(), None,
                            lambda *args: None)

    async def steps() -> tuple[str | None, dict]:
        assert _scraped(controller) == {}  # nothing tried yet: no series rather than a made-up 0
        await controller.apply(parse_document("policy: {Active: none}\n", "fallback.yaml", registry.names()))
        good = _scraped(controller)
        assert good["cri_resmgr_config_last_reload_successful"] == 1
        assert good["cri_resmgr_config_last_reload_success_timestamp_seconds"] == \
            good["cri_resmgr_config_last_reload_timestamp_seconds"] > 0
        error = await controller.apply_agent({"policy": "Active: nonesuch\n"}, "agent of node n1")
        bad = _scraped(controller)
        assert bad["cri_resmgr_config_last_reload_successful"] == 0
        assert bad["cri_resmgr_config_last_reload_success_timestamp_seconds"] == \
            good["cri_resmgr_config_last_reload_success_timestamp_seconds"]
        assert bad["cri_resmgr_config_last_reload_timestamp_seconds"] >= \
            good["cri_resmgr_config_last_reload_timestamp_seconds"]
        return error, controller.state().to_document()

    error, doc = asyncio.run(steps())
    assert error and "nonesuch" in error
    assert doc["reload"]["ok"] is False and doc["reload"]["source"] == "agent of node n1"
    assert controller.config is not None and controller.config.source == "fallback.yaml"
    shown = status.render(doc, "text")
    [line] = [line for line in shown.splitlines() if line.startswith("Last reload:")]
    assert line.startswith("Last reload: FAILED at ") and " UTC (agent of node n1): " in line
    assert "nonesuch" in line and "in force: the previous configuration, since " in line
