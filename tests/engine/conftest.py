"""Fixtures the engine's tests share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_engine_fake_runtime import Engine


@pytest.fixture
def engine_factory() -> Iterator[Callable[..., Engine]]:
    """Makes Engines (the engine over a fake runtime) that are closed after the test."""
    made: list[Engine] = []

    def make(*args: Any, **kw: Any) -> Engine:
        made.append(Engine(*args, **kw))
        return made[-1]

    yield make
    for e in made:
        e.close()
