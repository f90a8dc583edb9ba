"""Reads of workflows and runs. A caller reaches a workflow through its access rule (organisation.policy: a
role, or 404), and a run when they started it or own its workflow; every read here says whose it is."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Prefetch, Q, QuerySet

from agentsite.core.errors import AppError
from organisation.models import PRIVATE, VIEWER
from organisation.policy import MANAGE, OWNER, USE, can, require, visible_q
from workflows.graph import Edge, Graph, Node
from workflows.models import Workflow, WorkflowEdge, WorkflowGrant, WorkflowNode, WorkflowRun, WorkflowVersion

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

EXPORT_FORMAT = "agentsite.workflow"
EXPORT_VERSION = 1


def workflow_list_for(*, owner: AbstractBaseUser | int) -> QuerySet[Workflow]:
    return Workflow.objects.filter(owner=owner).order_by("name")


def workflow_visible_list(*, user: AbstractBaseUser) -> QuerySet[Workflow]:
    """The workflows the user owns or holds a role on (shared with them, or with everyone), by name then owner."""
    return (Workflow.objects.filter(visible_q(user, Workflow)).select_related("owner")
            .order_by("name", "owner__username"))


def workflow_roles(*, user: AbstractBaseUser, workflows: list[Workflow]) -> dict[Any, str]:
    """The user's role on each of these workflows (all visible to them), with one query for the grants."""
    roles: dict[Any, str] = {}
    shared = []
    for workflow in workflows:
        if user.is_staff or workflow.owner_id == user.pk:
            roles[workflow.pk] = OWNER
        else:
            roles[workflow.pk] = VIEWER  # at least: it is listed
            if workflow.visibility != PRIVATE:
                shared.append(workflow.pk)
    if shared:
        grants = WorkflowGrant.objects.filter(Q(user_id=user.pk) | Q(group__memberships__user_id=user.pk),
                                              resource_id__in=shared).values_list("resource_id", "role")
        for pk, role in grants:
            if role != VIEWER:
                roles[pk] = role
    return roles


def workflow_for(*, user: AbstractBaseUser, workflow_id: uuid.UUID, action: str = USE) -> Workflow:
    """The workflow with its nodes and edges, if the user may `action` it (organisation.policy); its `role`
    attribute holds the user's role. Raises AppError 404 (no such workflow, or no role on it), 403 `forbidden`
    (a role too low for `action`)."""
    workflow = (Workflow.objects.filter(pk=workflow_id).select_related("owner")
                .prefetch_related(Prefetch("nodes", WorkflowNode.objects.order_by("order")),
                                  Prefetch("edges", WorkflowEdge.objects.order_by("order"))).first())
    if workflow is None:
        raise AppError("not_found", "No workflow with that id.", 404)  # the policy's words for "no role"
    workflow.role = require(user, action, workflow)  # type: ignore[attr-defined]
    return workflow


def workflow_owned_for(*, user: AbstractBaseUser, workflow_id: uuid.UUID) -> Workflow:
    """The workflow, for what stays its owner's (its triggers): the owner and admins get it; anyone else who
    holds a role gets 403 `forbidden`, anyone else 404."""
    workflow = workflow_for(user=user, workflow_id=workflow_id)
    if workflow.role != OWNER:  # type: ignore[attr-defined]
        raise AppError("forbidden", f"Only the workflow's owner manages its triggers; you are a "
                       f"{workflow.role} of it.", 403)  # type: ignore[attr-defined]
    return workflow


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
    """What a run needs of its workflow: one version's graph (`version` 0: a workflow saved without versions,
    run from its stored nodes)."""

    id: uuid.UUID
    owner_id: int
    name: str
    version: int
    graph: Graph


# (workflow id, version) -> Runnable, per process. A version never changes once written, so an entry never goes
# stale; every save makes a new version number (services.version_record, the admin too), so one light query
# for the workflow's row tells which graph is current, in every process.
_runnables: dict[tuple[Any, int], Runnable] = {}
RUNNABLES_KEPT = 1000


def workflow_runnable(*, owner_id: int, workflow_id: uuid.UUID | None = None, name: str | None = None,
                      version: int | None = None) -> Runnable | None:
    """The owner's workflow (by id or by name) ready to run, at `version` (None: its latest), or None when the
    owner has no such workflow. Reads one row when the graph is cached. Raises AppError 404 `not_found` when
    the workflow has no such version."""
    row = _stamp_row(owner_id, workflow_id, name)
    if row is None:
        return None
    raw_pk, found_name, latest = row
    pk = Workflow._meta.pk.to_python(raw_pk)
    number = latest if version is None else version
    if version is not None and not 1 <= version <= latest:
        raise AppError("not_found", f"The workflow {found_name!r} has no version {version} (its latest is "
                       f"{latest}).", 404, {"version": [f"1 to {latest}."]})
    cached = _runnables.get((pk, number))
    if cached is not None and cached.name == found_name and cached.owner_id == owner_id:
        return cached
    if number:
        stored = WorkflowVersion.objects.filter(workflow_id=pk, number=number).values_list("graph", flat=True)
        graph = Graph.from_dict(stored.get())
    else:
        graph = _live_graph(pk)
    runnable = Runnable(pk, owner_id, found_name, number, graph)
    if number:  # the live graph of a workflow without versions is read every time
        if len(_runnables) >= RUNNABLES_KEPT:
            _runnables.clear()
        _runnables[(pk, number)] = runnable
    return runnable


def workflow_runnable_for(*, user: AbstractBaseUser, workflow_id: uuid.UUID,
                          version: int | None = None) -> Runnable:
    """The workflow of this id ready to run, for a user who may use it (its owner: one row read, as before
    sharing; anyone else: the access rule is asked first). Raises AppError 404 (no such workflow, no role on
    it, or no such version)."""
    runnable = workflow_runnable(owner_id=user.pk, workflow_id=workflow_id, version=version)
    if runnable is not None:
        return runnable
    workflow = Workflow.objects.filter(pk=workflow_id).only("id", "owner_id", "visibility").first()
    if workflow is None:
        raise AppError("not_found", "No workflow with that id.", 404)
    require(user, USE, workflow)
    runnable = workflow_runnable(owner_id=workflow.owner_id, workflow_id=workflow_id, version=version)
    if runnable is None:  # handed over or deleted between the two reads
        raise AppError("not_found", "No workflow with that id.", 404)
    return runnable


def _live_graph(pk: Any) -> Graph:
    nodes = WorkflowNode.objects.filter(workflow_id=pk).order_by("order")
    edges = WorkflowEdge.objects.filter(workflow_id=pk).order_by("order")
    return Graph(tuple(Node(node.node_id, node.type, node.name, node.config,
                            {"x": node.position_x, "y": node.position_y}) for node in nodes),
                 tuple(Edge(edge.source, edge.target) for edge in edges))


def _stamp_row(owner_id: int, workflow_id: uuid.UUID | None, name: str | None) -> tuple[Any, str, int] | None:
    """(id, name, version) of the owner's workflow as the database returns them, by a statement written once.

    Every run reads this row; through the ORM (`.first()`: a query built, ordered and compiled each time) it
    cost ~0.9 ms of CPU, a fifth of a small run's. The id goes through the field's own `to_python`.
    """
    meta, quote = Workflow._meta, connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(field).column) for field in ("id", "name", "version"))
    if workflow_id is not None:
        key, value = "id", meta.pk.get_db_prep_value(meta.pk.to_python(workflow_id), connection)
    else:
        key, value = "name", name
    sql = (f"SELECT {columns} FROM {quote(meta.db_table)} "
           f"WHERE {quote(meta.get_field('owner').column)} = %s AND {quote(meta.get_field(key).column)} = %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_id, value])
        return cursor.fetchone()


def workflow_graph(workflow: Workflow) -> Graph:
    """The workflow's graph from its (prefetched) nodes and edges."""
    nodes = tuple(Node(node.node_id, node.type, node.name, node.config, {"x": node.position_x, "y": node.position_y})
                  for node in workflow.nodes.all())
    return Graph(nodes, tuple(Edge(edge.source, edge.target) for edge in workflow.edges.all()))


def workflow_export(workflow: Workflow) -> dict[str, Any]:
    """The export document: `version` is the document format's, `workflow_version` the workflow's own."""
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "workflow_version": workflow.version,
            "name": workflow.name, "description": workflow.description, **workflow_graph(workflow).as_dict()}


def version_list_for(*, workflow: Workflow) -> QuerySet[WorkflowVersion]:
    return WorkflowVersion.objects.filter(workflow=workflow).order_by("-number")


def workflow_version_get(*, workflow: Workflow, number: int) -> WorkflowVersion:
    """One version of the (already owner-checked) workflow; raises AppError 404 when it has no such number."""
    found = WorkflowVersion.objects.filter(workflow=workflow, number=number).first()
    if found is None:
        raise AppError("not_found", f"This workflow has no version {number}.", 404)
    return found


def workflow_names_for(*, owner_id: int) -> list[str]:
    """The owner's workflow names, sorted. Plain SQL built once: every agent turn lists them (the workflow tools),
    and building the ORM query cost more than the database takes to answer it."""
    connection = connections[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute(_workflow_names_sql(connection.vendor), [owner_id])
        return [name for (name,) in cursor.fetchall()]


@functools.lru_cache(maxsize=8)
def _workflow_names_sql(vendor: str) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return (f"SELECT {quote('name')} FROM {quote(Workflow._meta.db_table)} WHERE {quote('owner_id')} = %s "
            f"ORDER BY {quote('name')}")


def run_list_for(*, workflow: Workflow, user: AbstractBaseUser | None = None) -> QuerySet[WorkflowRun]:
    """The workflow's runs, newest first: all of them for its owner and admins (`user` None: all), only the
    ones `user` started for anyone else."""
    found = WorkflowRun.objects.filter(workflow=workflow).order_by("-created_at")
    if user is not None and not can(user, MANAGE, workflow):
        found = found.filter(owner_id=user.pk)
    return found


def run_get_for(*, owner: AbstractBaseUser, run_id: uuid.UUID) -> WorkflowRun:
    """A run `owner` started, or a run of a workflow they own (admins: any); raises AppError 404 otherwise."""
    run = WorkflowRun.objects.filter(pk=run_id).select_related("workflow").first()
    if run is None or (run.owner_id != owner.pk and not can(owner, MANAGE, run.workflow)):
        raise AppError("not_found", "No such workflow run.", 404)
    return run
