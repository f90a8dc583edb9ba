"""Fixtures for the workflow tests: a graph builder and a test tool source."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentsite.agent.tools import StaticToolSource, Tool, registry


def graph(*nodes: dict[str, Any], edges: list[tuple[str, str]] = ()) -> dict[str, Any]:
    """Wire data for a workflow: nodes as dicts (id defaults to the name), edges as (from, to) ids."""
    return {"nodes": [{"id": node.get("id", node["name"]), "config": {}, **node} for node in nodes],
            "edges": [{"from": source, "to": target} for source, target in edges]}


def node(name: str, kind: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "config": config}


@pytest.fixture
def tool_source() -> Iterator[list[Tool]]:
    """Tools registered as the source "test" for the test's duration; append tools to the list."""
    tools: list[Tool] = []
    registry.register_source(StaticToolSource("test", lambda: tools))
    yield tools
    registry.unregister_source("test")
