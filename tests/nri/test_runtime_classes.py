"""-nri-runtime-classes: the plugin names a new container's block I/O and RDT classes
in its adjustment (for a runtime configured with the same classes), and only then."""

from __future__ import annotations

import asyncio

from cri_resmgr._proto import nri_api_pb2 as api
from cri_resmgr.engine.core import Bystander
from cri_resmgr.nri.cli import COMMAND, nri_settings
from cri_resmgr.nri.hooks import Hooks
from cri_resmgr.nri.view import NriRuntime
from tests.nri.runtime_double import container, pod


async def _nothing() -> None:
    return None


class _Core(Bystander):
    """Takes CreateContainer and sets nothing (the classes are the hook's to name)."""

    @property
    def events(self) -> frozenset[str]:
        return frozenset({"CreateContainer"})


def _reply(classes_of) -> api.CreateContainerResponse:
    hooks = Hooks(NriRuntime("test.sock"), _nothing)
    hooks.reconfigure(engine=_Core())
    hooks.classes_of = classes_of
    request = api.CreateContainerRequest(pod=pod("p", "besteffort"), container=container("c1", "p"))
    return asyncio.run(hooks.create_container(request))


def test_classes_are_named_in_the_adjustment_when_configured() -> None:
    asked: list[str] = []

    def classes_of(cid: str) -> tuple[str | None, str | None]:
        asked.append(cid)
        return "slowwriter", "besteffort"

    r = _reply(classes_of).adjust.linux.resources
    assert (r.blockio_class.value, r.rdt_class.value) == ("slowwriter", "besteffort")
    assert asked == ["c1"]


def test_no_class_no_field() -> None:
    r = _reply(lambda cid: (None, "gold")).adjust.linux.resources
    assert not r.HasField("blockio_class") and r.rdt_class.value == "gold"


def test_not_configured_nothing_is_named() -> None:
    r = _reply(None).adjust.linux.resources
    assert not r.HasField("blockio_class") and not r.HasField("rdt_class")


def test_the_flag() -> None:
    assert not nri_settings(COMMAND.parse([]), {}).runtime_classes
    assert nri_settings(COMMAND.parse(["-nri-runtime-classes"]), {}).runtime_classes
