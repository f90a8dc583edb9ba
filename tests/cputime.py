"""Where a test run's CPU goes: each test's CPU (this process and the processes it started and reaped: live
servers, browsers, sandboxes), summed by test directory and printed at the end of the run with the costliest
modules and tests, beside pytest's --durations (wall time).

A process is counted when it is reaped, so a server shared by a module or the session is counted in the test
that stopped it (its teardown), and a process nobody waited for is not counted. The figures locate the cost;
CI prints them for each shard (.ci/run).
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

TOP_TESTS = 25
TOP_MODULES = 25


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuReport:
    def __init__(self) -> None:
        self.tests: dict[str, tuple[float, float, float]] = {}  # nodeid -> (own CPU, children's CPU, wall)
        self.started = time.monotonic()
        self.at_start = _cpu()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        own, children = _cpu()
        wall = time.monotonic()
        yield
        own_after, children_after = _cpu()
        self.tests[item.nodeid] = (own_after - own, children_after - children, time.monotonic() - wall)

    def _summed(self, key: Callable[[str], str]) -> dict[str, list[float]]:
        """Each test's own CPU, its children's CPU, its wall time and a count of 1, summed by key(nodeid)."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
        for nodeid, figures in self.tests.items():
            row = sums[key(nodeid)]
            for index, value in enumerate((*figures, 1)):
                row[index] += value
        return sums

    def pytest_terminal_summary(self, terminalreporter):
        if not self.tests:
            return
        write = terminalreporter.write_line
        by_directory = self._summed(lambda nodeid: nodeid.split("::", 1)[0].rsplit("/", 1)[0])
        own_total, children_total = (now - then for now, then in zip(_cpu(), self.at_start, strict=True))
        terminalreporter.section("CPU by test directory (s): this process, processes it started, wall")
        for directory, (own, children, wall, count) in sorted(by_directory.items(), key=lambda kv: -sum(kv[1][:2])):
            write(f"{own + children:8.1f} = {own:7.1f} + {children:7.1f}  wall {wall:7.1f}  {count:5d} tests  "
                  f"{directory}")
        write(f"{own_total + children_total:8.1f} = {own_total:7.1f} + {children_total:7.1f}  wall "
              f"{time.monotonic() - self.started:7.1f}  the whole run (collection and session fixtures included)")
        by_module = self._summed(lambda nodeid: nodeid.split("::", 1)[0])
        terminalreporter.section(f"the {TOP_MODULES} modules costing the most CPU (s): this process + processes it "
                                 "started (a module's shared servers included)")
        for module, (own, children, wall, _count) in sorted(by_module.items(), key=lambda kv: -kv[1][0] - kv[1][1])[
                :TOP_MODULES]:
            write(f"{own + children:8.1f} = {own:6.1f} + {children:6.1f}  wall {wall:6.1f}  {module}")
        terminalreporter.section(f"the {TOP_TESTS} tests costing the most CPU (s): this process + processes it started")
        costly = sorted(self.tests.items(), key=lambda kv: -kv[1][0] - kv[1][1])[:TOP_TESTS]
        for nodeid, (own, children, wall) in costly:
            write(f"{own + children:8.1f} = {own:6.1f} + {children:6.1f}  wall {wall:6.1f}  {nodeid}")


def pytest_configure(config):
    config.pluginmanager.register(CpuReport(), "agentsite-cputime")
