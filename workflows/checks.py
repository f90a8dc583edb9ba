"""What makes a workflow's graph valid, checked against the node registry when a workflow is saved.

- node ids are unique, names are unique and 1-64 letters, digits, `-`, `_` (a name is how `${name}` and
  `context.outputs` refer to a node, so it must be safe in both);
- every type is in the node registry (workflows/nodes.py) and passes that type's own checks;
- every edge names nodes of the graph, with no self-loop and no duplicate edge;
- there is exactly one `input` node.
"""

from __future__ import annotations

from workflows.graph import INPUT_REFERENCE, NAME_PATTERN, CompileCheck, Graph, Problems
from workflows.nodes import NODE_TYPES, node_type


def validate(graph: Graph, *, compile_check: CompileCheck | None, problems: Problems | None = None) -> Problems:
    """Every problem of the graph (see the module docstring). `compile_check` None skips the JavaScript check."""
    problems = problems or Problems()
    ids = [node.id for node in graph.nodes]
    names = [node.name for node in graph.nodes]
    for node in graph.nodes:
        if ids.count(node.id) > 1:
            problems.node(node, f"the id {node.id!r} is used by another node.")
        if not NAME_PATTERN.match(node.name):
            problems.node(node, "a name is 1-64 letters, digits, '-' or '_'.")
        elif names.count(node.name) > 1:
            problems.node(node, "another node has the same name.")
        elif node.name == INPUT_REFERENCE and node.type != "input":
            problems.node(node, f"{INPUT_REFERENCE!r} is reserved for the run's input (${{input}}).")
        kind = node_type(node.type)
        if kind is None:
            problems.node(node, f"unknown type; use one of {', '.join(_type_names())}.")
            continue
        for message in kind.problems(node, graph, compile_check):
            problems.node(node, message)
    _edge_problems(graph, problems)
    inputs = [node for node in graph.nodes if node.type == "input"]
    if len(inputs) != 1:
        problems.add("workflow", f"A workflow needs exactly one input node (it has {len(inputs)}).")
    return problems


def _type_names() -> list[str]:
    return sorted(NODE_TYPES)


def _edge_problems(graph: Graph, problems: Problems) -> None:
    known = graph.by_id()
    seen: set[tuple[str, str]] = set()
    for edge in graph.edges:
        where = f"edge:{edge.key}"
        missing = [end for end in (edge.source, edge.target) if end not in known]
        if missing:
            problems.add(where, f"The edge {edge.key} names no node {', '.join(map(repr, missing))}.")
        elif edge.source == edge.target:
            problems.add(where, f"The edge {edge.key} joins a node to itself.")
        elif (edge.source, edge.target) in seen:
            problems.add(where, f"The edge {edge.key} is listed twice.")
        seen.add((edge.source, edge.target))
