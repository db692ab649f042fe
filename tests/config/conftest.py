"""The Config service's tests serve it on a loop thread of its own, as the agent's tests do."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness.config_relay import RelayHarness


@pytest.fixture
def relay(sockdir: str) -> Iterator[RelayHarness]:
    harness = RelayHarness(os.path.join(sockdir, "config.sock"))
    harness.start()
    yield harness
    harness.close()
