"""Fixtures for the workflow tests: a graph builder, and the runtime tests' tool source."""

from __future__ import annotations

from typing import Any

from tests.agent.conftest import tool_source  # noqa: F401 - the fixture, shared with the runtime's tests


def graph(*nodes: dict[str, Any], edges: list[tuple[str, str]] = ()) -> dict[str, Any]:
    """Wire data for a workflow: nodes as dicts (id defaults to the name), edges as (from, to) ids."""
    return {"nodes": [{"id": node.get("id", node["name"]), "config": {}, **node} for node in nodes],
            "edges": [{"from": source, "to": target} for source, target in edges]}


def node(name: str, kind: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "config": config}
