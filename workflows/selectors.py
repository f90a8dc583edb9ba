"""Reads of workflows and runs, always scoped to their owner."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Prefetch, QuerySet

from agentsite.core.errors import AppError
from workflows.graph import Edge, Graph, Node
from workflows.models import Workflow, WorkflowEdge, WorkflowNode, WorkflowRun

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

EXPORT_FORMAT = "agentsite.workflow"
EXPORT_VERSION = 1


def workflow_list_for(*, owner: AbstractBaseUser | int) -> QuerySet[Workflow]:
    return Workflow.objects.filter(owner=owner).order_by("name")


def workflow_get_for(*, owner: AbstractBaseUser | int, workflow_id: uuid.UUID) -> Workflow:
    """The owner's workflow with its nodes and edges; raises AppError 404 for another user's or a missing one."""
    workflow = (workflow_list_for(owner=owner).filter(pk=workflow_id)
                .prefetch_related(Prefetch("nodes", WorkflowNode.objects.order_by("order")),
                                  Prefetch("edges", WorkflowEdge.objects.order_by("order"))).first())
    if workflow is None:
        raise AppError("not_found", "No such workflow.", 404)
    return workflow


@dataclass(frozen=True)
class Runnable:
    """What a run needs of its workflow: the graph as of its stamp (`updated_at` as the database returns it)."""

    id: uuid.UUID
    owner_id: int
    name: str
    stamp: Any
    graph: Graph


# workflow id -> Runnable, per process. Every change of a workflow's nodes or edges moves its updated_at
# (services, admin), so one light query tells whether the cached graph is current, in every process.
_runnables: dict[Any, Runnable] = {}
RUNNABLES_KEPT = 1000


def workflow_runnable(*, owner_id: int, workflow_id: uuid.UUID | None = None,
                      name: str | None = None) -> Runnable | None:
    """The owner's workflow (by id or by name) ready to run, or None. Reads one row when its graph is cached.

    The stamp is read before the nodes and edges: a change committed in between leaves a newer graph under
    an older stamp, which the next call replaces; never an older graph under a newer stamp.
    """
    row = _stamp_row(owner_id, workflow_id, name)
    if row is None:
        return None
    raw_pk, found_name, stamp = row
    pk = Workflow._meta.pk.to_python(raw_pk)
    cached = _runnables.get(pk)
    if cached is not None and cached.stamp == stamp and cached.name == found_name:
        return cached
    nodes = WorkflowNode.objects.filter(workflow_id=pk).order_by("order")
    edges = WorkflowEdge.objects.filter(workflow_id=pk).order_by("order")
    graph = Graph(tuple(Node(node.node_id, node.type, node.name, node.config,
                             {"x": node.position_x, "y": node.position_y}) for node in nodes),
                  tuple(Edge(edge.source, edge.target) for edge in edges))
    if len(_runnables) >= RUNNABLES_KEPT:
        _runnables.clear()
    runnable = _runnables[pk] = Runnable(pk, owner_id, found_name, stamp, graph)
    return runnable


def _stamp_row(owner_id: int, workflow_id: uuid.UUID | None, name: str | None) -> tuple[Any, str, Any] | None:
    """(id, name, updated_at) of the owner's workflow as the database returns them, by a statement written once.

    Every run reads this row; through the ORM (`.first()`: a query built, ordered and compiled each time) it
    cost ~0.9 ms of CPU, a fifth of a small run's. The values are compared, never shown: the stamp needs no
    conversion, the id goes through the field's own `to_python`.
    """
    from django.db import connection

    meta, quote = Workflow._meta, connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(field).column) for field in ("id", "name", "updated_at"))
    if workflow_id is not None:
        key, value = "id", meta.pk.get_db_prep_value(meta.pk.to_python(workflow_id), connection)
    else:
        key, value = "name", name
    sql = (f"SELECT {columns} FROM {quote(meta.db_table)} "
           f"WHERE {quote(meta.get_field('owner').column)} = %s AND {quote(meta.get_field(key).column)} = %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_id, value])
        return cursor.fetchone()


def workflow_get_by_name(*, owner_id: int, name: str) -> Workflow | None:
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


def workflow_names_for(*, owner_id: int) -> list[str]:
    return list(Workflow.objects.filter(owner_id=owner_id).order_by("name").values_list("name", flat=True))


def run_list_for(*, workflow: Workflow) -> QuerySet[WorkflowRun]:
    return WorkflowRun.objects.filter(workflow=workflow).order_by("-created_at")


def run_get_for(*, owner: AbstractBaseUser, run_id: uuid.UUID) -> WorkflowRun:
    """The owner's run; raises AppError 404 for another user's or a missing one."""
    run = WorkflowRun.objects.filter(owner=owner, pk=run_id).first()
    if run is None:
        raise AppError("not_found", "No such workflow run.", 404)
    return run
