"""Reads of workflows and runs, always scoped to their owner."""

from __future__ import annotations

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
