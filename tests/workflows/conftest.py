"""Fixtures for the workflow tests: a graph builder, and the runtime tests' tool source."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.agent.conftest import tool_source  # noqa: F401 - the fixture, shared with the runtime's tests


def graph(*nodes: dict[str, Any], edges: list[tuple[str, str]] = ()) -> dict[str, Any]:
    """Wire data for a workflow: nodes as dicts (id defaults to the name), edges as (from, to) ids."""
    return {"nodes": [{"id": node.get("id", node["name"]), "config": {}, **node} for node in nodes],
            "edges": [{"from": source, "to": target} for source, target in edges]}


def node(name: str, kind: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "config": config}


# Far from real minutes, and from another run's (the window is shared through Redis when REDIS_URL is set).
_minutes = iter(range(10**9 + random.randrange(10**6) * 1000, 3 * 10**9, 1000))


class PinnedMinute:
    """The webhook audit's flood window, pinned (workflows.triggers._minute): a fresh minute for each test, which
    `advance` moves on, so no test depends on when a real minute turns."""

    def __init__(self, monkeypatch):
        from workflows import triggers

        self.value = next(_minutes)
        monkeypatch.setattr(triggers, "_minute", lambda: self.value)

    def advance(self) -> None:
        self.value += 1


@pytest.fixture
def audit_minute(monkeypatch) -> PinnedMinute:
    return PinnedMinute(monkeypatch)
