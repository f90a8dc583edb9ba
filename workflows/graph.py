"""A workflow's graph as plain data: nodes, edges, `${name}` references, and their shapes on the wire.

The same `Graph` is validated when a workflow is saved (workflows/checks.py), kept by every run, exported,
and walked by the engine. It knows no node type, touches no database and runs no code, so every other
module of the app can build on it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REFERENCE = re.compile(r"\$\{([^}]*)\}")
MAX_NODES = 500
INPUT_REFERENCE = "input"


@dataclass(frozen=True)
class Node:
    id: str
    type: str
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    position: dict[str, float] = field(default_factory=lambda: {"x": 0.0, "y": 0.0})

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "name": self.name, "config": self.config,
                "position": self.position}

    @property
    def label(self) -> str:
        return f"Node {self.name!r} ({self.type})"


@dataclass(frozen=True)
class Edge:
    source: str  # node id ("from" on the wire)
    target: str  # node id ("to")

    def as_dict(self) -> dict[str, str]:
        return {"from": self.source, "to": self.target}

    @property
    def key(self) -> str:
        return f"{self.source}->{self.target}"


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...] = ()
    edges: tuple[Edge, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": [node.as_dict() for node in self.nodes], "edges": [edge.as_dict() for edge in self.edges]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Graph:
        """A graph from stored (already validated) data."""
        nodes = tuple(Node(item["id"], item["type"], item["name"], dict(item.get("config") or {}),
                           dict(item.get("position") or {"x": 0.0, "y": 0.0})) for item in data.get("nodes", []))
        edges = tuple(Edge(item["from"], item["to"]) for item in data.get("edges", []))
        return cls(nodes, edges)

    def by_id(self) -> dict[str, Node]:
        return {node.id: node for node in self.nodes}

    def by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}


def references(value: Any) -> Iterator[str]:
    """Every `${name}` inside a string, or inside the strings of a JSON value."""
    if isinstance(value, str):
        yield from (match.strip() for match in REFERENCE.findall(value))
    elif isinstance(value, dict):
        for inner in value.values():
            yield from references(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from references(inner)


class Problems:
    """Validation failures keyed by what they name: `node:<id>`, `edge:<from>-><to>` or `workflow`."""

    def __init__(self) -> None:
        self.found: dict[str, list[str]] = {}

    def add(self, where: str, message: str) -> None:
        self.found.setdefault(where, []).append(message)

    def node(self, node: Node, message: str) -> None:
        self.add(f"node:{node.id}", f"{node.label}: {message}")

    def __bool__(self) -> bool:
        return bool(self.found)

    def first(self) -> str:
        return next(iter(self.found.values()))[0]


# Raw wire data -> nodes and edges (ids assigned where missing). Shapes are checked here; meaning in checks.py.

def nodes_from_wire(items: Any, problems: Problems) -> list[Node]:
    if not isinstance(items, list):
        problems.add("workflow", "nodes must be a list of node objects.")
        return []
    if len(items) > MAX_NODES:
        problems.add("workflow", f"A workflow may have at most {MAX_NODES} nodes.")
        return []
    return [node for index, item in enumerate(items) if (node := node_from_wire(item, index, problems))]


def node_from_wire(item: Any, index: int, problems: Problems) -> Node | None:
    where = f"nodes[{index}]"
    if not isinstance(item, dict):
        problems.add(where, f"{where} must be an object with type, name, config and position.")
        return None
    unknown = sorted(set(item) - {"id", "type", "name", "config", "position"})
    if unknown:
        problems.add(where, f"{where} has unknown fields: {', '.join(unknown)}.")
    node_id = item.get("id") or uuid.uuid4().hex[:12]
    kind, name, config = item.get("type"), item.get("name"), item.get("config") or {}
    if not isinstance(node_id, str) or not NAME_PATTERN.match(node_id):
        problems.add(where, f"{where}.id must be 1-64 letters, digits, '-' or '_'.")
        return None
    if not isinstance(kind, str) or not isinstance(name, str) or not isinstance(config, dict):
        problems.add(f"node:{node_id}", f"{where} ({node_id}) needs a string type and name, and an object config.")
        return None
    if holds_nul(config):  # PostgreSQL cannot store one; SQLite could, and the answer must not depend on it
        problems.add(f"node:{node_id}", f"{where} ({node_id}): config text cannot hold NUL characters.")
        return None
    position = _position(item.get("position"), where, problems)
    return Node(node_id, kind, name, config, position)


def holds_nul(value: Any) -> bool:
    """Whether a JSON value has a NUL character in any string, key or value, at any depth."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(key) or holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(holds_nul(item) for item in value)
    return False


def _position(value: Any, where: str, problems: Problems) -> dict[str, float]:
    if value is None:
        return {"x": 0.0, "y": 0.0}
    coordinates = [value.get(axis) for axis in ("x", "y")] if isinstance(value, dict) else None
    if not coordinates or not all(_is_number(item) for item in coordinates) or set(value) - {"x", "y"}:
        problems.add(where, f"{where}.position must be {{x: number, y: number}}.")
        return {"x": 0.0, "y": 0.0}
    return {"x": float(coordinates[0]), "y": float(coordinates[1])}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e9


def edges_from_wire(items: Any, problems: Problems) -> list[Edge]:
    if not isinstance(items, list):
        problems.add("workflow", "edges must be a list of {from, to} objects.")
        return []
    edges = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != {"from", "to"} or not all(
                isinstance(item[key], str) for key in ("from", "to")):
            problems.add(f"edges[{index}]", f"edges[{index}] must be {{from: node id, to: node id}}.")
            continue
        edges.append(Edge(item["from"], item["to"]))
    return edges


CompileCheck = Callable[[str, str], str | None]  # (source, "code" | "condition") -> the syntax error, or None


def successors(graph: Graph) -> dict[str, list[str]]:
    """Each node's next nodes: its edges' targets, and a condition's branches (which imply edges)."""
    following: dict[str, list[str]] = {node.id: [] for node in graph.nodes}
    for edge in graph.edges:
        if edge.target not in following[edge.source]:
            following[edge.source].append(edge.target)
    for node in graph.nodes:
        if node.type == "condition":
            for key in ("trueBranch", "falseBranch"):
                target = node.config.get(key)
                if isinstance(target, str) and target in following and target not in following[node.id]:
                    following[node.id].append(target)
    return following
