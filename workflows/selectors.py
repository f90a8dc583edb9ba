"""Reads of workflows and runs, always scoped to their owner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet

from agentsite.errors import AppError
from workflows.graph import Edge, Graph, Node
from workflows.models import Workflow, WorkflowEdge, WorkflowNode, WorkflowRun

EXPORT_FORMAT = "agentsite.workflow"
EXPORT_VERSION = 1


def workflow_list_for(*, owner: Any) -> QuerySet[Workflow]:
    return Workflow.objects.filter(owner=owner).order_by("name")


def workflow_get_for(*, owner: Any, workflow_id: Any) -> Workflow:
    """The owner's workflow with its nodes and edges; raises AppError 404 for another user's or a missing one."""
    workflow = (workflow_list_for(owner=owner).filter(pk=workflow_id)
                .prefetch_related(Prefetch("nodes", WorkflowNode.objects.order_by("order")),
                                  Prefetch("edges", WorkflowEdge.objects.order_by("order"))).first())
    if workflow is None:
        raise AppError("not_found", "No such workflow.", 404)
    return workflow


@dataclass(frozen=True)
class Runnable:
    """What a run needs of its workflow: the graph as of `updated_at`."""

    id: Any
    owner_id: Any
    name: str
    updated_at: datetime
    graph: Graph


# workflow id -> Runnable, per process. Every change of a workflow's nodes or edges moves its updated_at
# (services, admin), so one light query tells whether the cached graph is current, in every process.
_runnables: dict[Any, Runnable] = {}
RUNNABLES_KEPT = 1000


def workflow_runnable(*, owner_id: Any, workflow_id: Any = None, name: str | None = None) -> Runnable | None:
    """The owner's workflow (by id or by name) ready to run, or None. Reads one row when its graph is cached.

    The stamp is read before the nodes and edges: a change committed in between leaves a newer graph under
    an older stamp, which the next call replaces; never an older graph under a newer stamp.
    """
    rows = Workflow.objects.filter(owner_id=owner_id)
    rows = rows.filter(pk=workflow_id) if workflow_id is not None else rows.filter(name=name)
    row = rows.values_list("pk", "name", "updated_at").first()
    if row is None:
        return None
    pk, found_name, updated_at = row
    cached = _runnables.get(pk)
    if cached is not None and cached.updated_at == updated_at and cached.name == found_name:
        return cached
    nodes = WorkflowNode.objects.filter(workflow_id=pk).order_by("order")
    edges = WorkflowEdge.objects.filter(workflow_id=pk).order_by("order")
    graph = Graph(tuple(Node(node.node_id, node.type, node.name, node.config,
                             {"x": node.position_x, "y": node.position_y}) for node in nodes),
                  tuple(Edge(edge.source, edge.target) for edge in edges))
    if len(_runnables) >= RUNNABLES_KEPT:
        _runnables.clear()
    runnable = _runnables[pk] = Runnable(pk, owner_id, found_name, updated_at, graph)
    return runnable


def workflow_get_by_name(*, owner_id: Any, name: str) -> Workflow | None:
    return (Workflow.objects.filter(owner_id=owner_id, name=name)
            .prefetch_related(Prefetch("nodes", WorkflowNode.objects.order_by("order")),
                              Prefetch("edges", WorkflowEdge.objects.order_by("order"))).first())


def workflow_graph(workflow: Workflow) -> Graph:
    """The workflow's graph from its (prefetched) nodes and edges."""
    nodes = tuple(Node(node.node_id, node.type, node.name, node.config, {"x": node.position_x, "y": node.position_y})
                  for node in workflow.nodes.all())
    return Graph(nodes, tuple(Edge(edge.source, edge.target) for edge in workflow.edges.all()))


def workflow_export(workflow: Workflow) -> dict[str, Any]:
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "name": workflow.name,
            "description": workflow.description, **workflow_graph(workflow).as_dict()}


def workflow_names_for(*, owner_id: Any) -> list[str]:
    return list(Workflow.objects.filter(owner_id=owner_id).order_by("name").values_list("name", flat=True))


def run_list_for(*, workflow: Workflow) -> QuerySet[WorkflowRun]:
    return WorkflowRun.objects.filter(workflow=workflow).order_by("-created_at")


def run_get_for(*, owner: Any, run_id: Any) -> WorkflowRun:
    """The owner's run; raises AppError 404 for another user's or a missing one."""
    run = WorkflowRun.objects.filter(owner=owner, pk=run_id).first()
    if run is None:
        raise AppError("not_found", "No such workflow run.", 404)
    return run
