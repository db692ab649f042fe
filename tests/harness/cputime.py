"""`pytest --cpu-durations=N`: the N tests that cost the most CPU, for finding slow tests on
a shared machine, where `--durations` (wall time) mostly measures the neighbours.

A test's cost is the CPU time (user + system) of the pytest process and of the child
processes reaped while it ran (setup, call and teardown), so a relay or containerd the test
starts and stops is counted with it. A session-scoped fixture's process counts with the
test whose teardown reaps it; daemonised processes (containerd's shims) are not counted.
The total of the session is printed too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Cost:
    nodeid: str
    cpu_s: float
    wall_s: float


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuDurations:
    def __init__(self, count: int) -> None:
        self.count = count
        self.costs: list[Cost] = []
        self._session_cpu = _cpu()
        self._session_wall = time.monotonic()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        cpu, wall = _cpu(), time.monotonic()
        yield
        self.costs.append(Cost(item.nodeid, _cpu() - cpu, time.monotonic() - wall))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        total_cpu = _cpu() - self._session_cpu
        tr.write_sep("=", f"{self.count} most expensive tests by CPU time (user+sys, children reaped included)")
        for c in sorted(self.costs, key=lambda c: c.cpu_s, reverse=True)[: self.count]:
            tr.write_line(f"{c.cpu_s:8.2f}s cpu {c.wall_s:8.2f}s wall  {c.nodeid}")
        tests_cpu = sum(c.cpu_s for c in self.costs)
        tr.write_line(f"session: {total_cpu:.1f}s cpu ({tests_cpu:.1f}s in {len(self.costs)} tests), "
                      f"{time.monotonic() - self._session_wall:.1f}s wall")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="show the N tests that cost the most CPU time (user+sys, with reaped children)")


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("--cpu-durations")
    if count is not None:
        config.pluginmanager.register(CpuDurations(count), "cpu-durations")
