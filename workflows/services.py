"""Writes of workflows: create, update, add a node, import, delete; and the run records.

Every save validates the whole graph (`workflows.checks.validate`, and `model_problems`: an `llm` node's
`model` must be in the model catalogue) and stores nodes and edges together in
one transaction, so a stored workflow is always valid. A failure is one AppError 400 `invalid` whose
details name the node (`node:<id>`), the edge (`edge:<from>-><to>`) or the `workflow`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, DateTimeField, F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from django_q.models import Schedule

from agentsite.agent.config import get_settings
from agentsite.agent.modelchoice import model_problem
from agentsite.core import metrics
from agentsite.core.errors import AppError
from agentsite.core.processes import current_process_id, owned_by
from workflows.checks import validate
from workflows.graph import (
    NAME_PATTERN,
    Graph,
    Node,
    Problems,
    edges_from_wire,
    node_from_wire,
    nodes_from_wire,
)
from workflows.models import (
    Workflow,
    WorkflowApproval,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
    WorkflowTrigger,
    WorkflowVersion,
)
from workflows.sandbox import SandboxError, sandbox_pool
from workflows.selectors import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    Runnable,
    workflow_get_for,
    workflow_graph,
    workflow_version_get,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from agentsite.agent.usage import Caller

logger = logging.getLogger(__name__)

MAX_DESCRIPTION = 2000


def compile_check(source: str, kind: str) -> str | None:
    """The sandbox's syntax check. Raises AppError 503 when the sandbox cannot answer."""
    try:
        return sandbox_pool().compile_problem_sync(source, kind=kind)
    except SandboxError as exc:
        raise AppError("unavailable", f"The JavaScript sandbox could not check the code: {exc.message}", 503) from exc


def _raise_problems(problems: Problems) -> None:
    if problems:
        raise AppError("invalid", problems.first(), 400, problems.found)


def model_problems(graph: Graph, problems: Problems | None = None) -> Problems:
    """Every `llm` node whose `model` is not in the model catalogue (agentsite.agent.routing), named. Checked on
    save, here rather than in workflows.graph, which touches nothing outside the graph."""
    problems = problems or Problems()
    settings = None
    for node in graph.nodes:
        model = node.config.get("model") if node.type == "llm" else None
        if isinstance(model, str) and model:
            settings = settings or get_settings()
            problem = model_problem(model, settings)
            if problem:
                problems.node(node, f"config.model: {problem}")
    return problems


def _checked(graph: Graph) -> Graph:
    problems = validate(graph, compile_check=compile_check)
    _raise_problems(problems or model_problems(graph, problems))
    return graph


def graph_from_wire(nodes: Any, edges: Any) -> Graph:
    """A validated graph from request data. Raises AppError 400 naming the node or edge."""
    problems = Problems()
    graph = Graph(tuple(nodes_from_wire(nodes, problems)), tuple(edges_from_wire(edges, problems)))
    _raise_problems(problems)
    return _checked(graph)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise AppError("invalid", "name must be 1-64 letters, digits, '-' or '_'.", 400,
                       {"name": ["Use 1-64 letters, digits, '-' or '_'."]})
    return name


def _conflict(name: str) -> AppError:
    return AppError("conflict", f"You already have a workflow named {name!r}.", 409, {"name": [f"{name!r} is taken."]})


def _store_graph(workflow: Workflow, graph: Graph) -> None:
    WorkflowNode.objects.filter(workflow=workflow).delete()
    WorkflowEdge.objects.filter(workflow=workflow).delete()
    WorkflowNode.objects.bulk_create([
        WorkflowNode(workflow=workflow, node_id=node.id, type=node.type, name=node.name, config=node.config,
                     position_x=node.position["x"], position_y=node.position["y"], order=order)
        for order, node in enumerate(graph.nodes)])
    WorkflowEdge.objects.bulk_create([WorkflowEdge(workflow=workflow, source=edge.source, target=edge.target,
                                                   order=order) for order, edge in enumerate(graph.edges)])


def version_record(workflow: Workflow, graph: Graph, note: str) -> WorkflowVersion:
    """The next version of `workflow` (its name and description as saved, this graph). Call it inside the
    save's transaction: the increment locks the workflow's row, so concurrent saves get distinct numbers, and a
    failed save leaves no version."""
    Workflow.objects.filter(pk=workflow.pk).update(version=F("version") + 1, updated_at=timezone.now())
    number = Workflow.objects.values_list("version", flat=True).get(pk=workflow.pk)
    workflow.version = number
    return WorkflowVersion.objects.create(workflow_id=workflow.pk, number=number, name=workflow.name,
                                          description=workflow.description, graph=graph.as_dict(), note=note)


def version_record_live(workflow_ids: Any, note: str) -> None:
    """A version of each workflow from its stored nodes and edges (an edit made outside these services: the
    Django admin), so the next run, which runs the latest version, runs what was edited."""
    for workflow in Workflow.objects.filter(pk__in=set(workflow_ids)):
        with transaction.atomic():
            current = workflow_get_for(owner=workflow.owner_id, workflow_id=workflow.pk)
            version_record(current, workflow_graph(current), note)


def workflow_create(*, owner: AbstractBaseUser, name: Any, description: str = "", nodes: Any = None,
                    edges: Any = None, note: str = "create") -> Workflow:
    """Create a workflow (an empty one gets an input node). Raises AppError 400 `invalid`, 409 `conflict`."""
    name = _check_name(name)
    if nodes is None and edges is None:
        nodes, edges = [{"id": "input", "type": "input", "name": "input"}], []
    graph = graph_from_wire(nodes if nodes is not None else [], edges if edges is not None else [])
    try:
        with transaction.atomic():
            workflow = Workflow.objects.create(owner=owner, name=name, description=description)
            _store_graph(workflow, graph)
            version_record(workflow, graph, note)
    except IntegrityError:
        raise _conflict(name) from None
    return workflow_get_for(owner=owner, workflow_id=workflow.pk)


def workflow_update(*, workflow: Workflow, changes: dict[str, Any], note: str = "update") -> Workflow:
    """Apply any of name, description, nodes, edges (nodes and edges replace the stored ones; given alone, the
    other is kept). Raises AppError 400 `invalid`, 409 `conflict`."""
    current = workflow_graph(workflow)
    if "nodes" in changes or "edges" in changes:
        nodes = changes["nodes"] if "nodes" in changes else [node.as_dict() for node in current.nodes]
        edges = changes["edges"] if "edges" in changes else [edge.as_dict() for edge in current.edges]
        graph = graph_from_wire(nodes, edges)
    else:
        graph = None
    if "name" in changes:
        workflow.name = _check_name(changes["name"])
    if "description" in changes:
        workflow.description = changes["description"]
    try:
        with transaction.atomic():
            workflow.save()
            if graph is not None:
                _store_graph(workflow, graph)
            version_record(workflow, graph if graph is not None else current, note)
    except IntegrityError:
        raise _conflict(workflow.name) from None
    return workflow_get_for(owner=workflow.owner_id, workflow_id=workflow.pk)


def workflow_node_add(*, workflow: Workflow, node: dict[str, Any]) -> Node:
    """Add one node; the whole graph must stay valid. Raises AppError 400 `invalid`."""
    problems = Problems()
    added = node_from_wire(node, len(workflow.nodes.all()), problems)
    _raise_problems(problems)
    assert added is not None
    current = workflow_graph(workflow)
    graph = _checked(Graph((*current.nodes, added), current.edges))
    with transaction.atomic():
        _store_graph(workflow, graph)
        version_record(workflow, graph, f"node {added.name} added")
    return added


def workflow_version_restore(*, workflow: Workflow, number: int) -> Workflow:
    """Make a new version whose nodes, edges and description are version `number`'s (the name stays: it is how
    /v1 and the tools reach the workflow). The graph is validated again (a model it names may since have left
    the catalogue). Raises AppError 404 for a missing version, 400 `invalid`."""
    old = workflow_version_get(workflow=workflow, number=number)
    return workflow_update(workflow=workflow, changes={"description": old.description, **old.graph},
                           note=f"restore of version {number}")


def workflow_delete(*, workflow: Workflow) -> None:
    workflow.delete()  # nodes, edges and runs go with it


def workflow_transfer(workflow: Workflow, new_owner: AbstractBaseUser) -> None:
    """Hand the workflow to `new_owner` (organisation.access.transfer calls it inside its transaction, the caller
    checked). Its webhook triggers are deleted: their secrets were handed to the previous owner's systems and
    their runs acted as the previous owner (or one of their API keys), so the new owner makes their own. Pending
    approvals of its runs that the previous owner was to decide go to the new owner. Runs stay whoever's started
    them. Raises AppError 409 `conflict` when the new owner has a workflow of that name."""
    previous = workflow.owner_id
    workflow.owner = new_owner
    try:
        with transaction.atomic():
            workflow.save(update_fields=["owner", "updated_at"])
    except IntegrityError:  # workflow_owner_name_unique: the new owner has one of this name
        workflow.owner_id = previous
        raise _taken_by(new_owner, workflow.name) from None
    WorkflowTrigger.objects.filter(workflow=workflow).delete()
    through = WorkflowApproval.approvers.through
    pending = WorkflowApproval.objects.filter(run__workflow=workflow, status=WorkflowApproval.PENDING,
                                              approvers=previous).values_list("pk", flat=True)
    for approval_id in list(pending):
        through.objects.filter(workflowapproval_id=approval_id, user_id=previous).delete()
        through.objects.get_or_create(workflowapproval_id=approval_id, user_id=new_owner.pk)


def _taken_by(user: AbstractBaseUser, name: str) -> AppError:
    return AppError("conflict", f"{user.get_username()} already has a workflow named {name!r}; rename one first.",
                    409, {"name": [f"{name!r} is taken by {user.get_username()}."], "workflow": name})


def check_export_header(document: Any) -> None:
    """An import's document must be an agentsite export of a version this server reads, with no unknown
    fields. Raises AppError 400 naming the problem."""
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise AppError("invalid", f"This is not an agentsite workflow export (format must be {EXPORT_FORMAT!r}).",
                       400, {"format": [f"Expected {EXPORT_FORMAT!r}."]})
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise AppError("invalid", "version must be a positive integer.", 400, {"version": ["Expected 1."]})
    if version > EXPORT_VERSION:
        raise AppError("invalid", f"This export is version {version}, from a newer agentsite; this server reads "
                       f"version {EXPORT_VERSION}. Upgrade the server to import it.", 400,
                       {"version": [f"Version {version} is newer than {EXPORT_VERSION}."]})
    unknown = sorted(set(document) - {"format", "version", "workflow_version", "name", "description", "nodes",
                                      "edges"})
    if unknown:
        raise AppError("unknown_field", f"Unknown fields in the export: {', '.join(unknown)}.", 400,
                       {"fields": unknown})


def workflow_import(*, owner: AbstractBaseUser, document: dict[str, Any]) -> Workflow:
    """Create a workflow from an export document whose header passed check_export_header and whose fields
    have their types (the view's serializer). Raises AppError 400 (naming the problem), 409 `conflict`."""
    check_export_header(document)
    origin = document.get("workflow_version")
    return workflow_create(owner=owner, name=document.get("name"), description=document.get("description", ""),
                           nodes=document.get("nodes", []), edges=document.get("edges", []),
                           note="import" + (f" of version {origin}" if isinstance(origin, int) else ""))


# --- runs ---------------------------------------------------------------------------------------------

def run_create(*, workflow: Runnable, input_text: str, queued: bool = False,
               caller: Caller | None = None) -> WorkflowRun:
    """A run record holding the graph (and the version number) it will run: `queued` for the task cluster,
    else `running` now. `caller`: who starts it (None: the workflow's owner), whose run it is and whose rights
    it acts with (their model access, budget, tools, knowledge; an API key: the run's model calls count to it;
    no admin rights: its tools never get them), whoever owns the workflow."""
    starter = caller.user_id if caller is not None and caller.user_id is not None else workflow.owner_id
    run = WorkflowRun(
        workflow_id=workflow.id, owner_id=starter, input=input_text, graph=workflow.graph.as_dict(),
        version=workflow.version or None, acting_key=caller.key_id if caller is not None else "",
        admin_rights=caller.admin if caller is not None else None,
        status=WorkflowRun.QUEUED if queued else WorkflowRun.RUNNING, started_at=None if queued else timezone.now(),
        process="" if queued else current_process_id())
    return _run_insert(run)


def _run_insert(run: WorkflowRun) -> WorkflowRun:
    """Insert a new run by a statement written once, as `Model.save()` would (every concrete field through its
    own `pre_save` and `get_db_prep_save`: the defaults, `created_at`, the JSON columns). Every run is one of
    these; through the ORM (an insert query built and compiled each time) it cost ~0.15 ms more of CPU
    (tests/workflows/test_run_records.py: the row equals the ORM's)."""
    fields = WorkflowRun._meta.local_concrete_fields
    values = [field.get_db_prep_save(field.pre_save(run, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(connection.vendor), values)
    run._state.adding, run._state.db = False, connection.alias
    return run


_statements: dict[tuple[str, str], str] = {}


def _insert_sql(vendor: str) -> str:
    sql = _statements.get(("insert", vendor))
    if sql is None:
        quote, meta = connection.ops.quote_name, WorkflowRun._meta
        columns = [quote(field.column) for field in meta.local_concrete_fields]
        sql = _statements[("insert", vendor)] = (
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})")
    return sql


def run_claim(*, run_id: str) -> WorkflowRun | None:
    """Move a queued run to running; None when another worker claimed it (or it is gone)."""
    # A resumed run (queued again after its approvals) keeps when it first started.
    claimed = WorkflowRun.objects.filter(pk=run_id, status=WorkflowRun.QUEUED).update(
        status=WorkflowRun.RUNNING, process=current_process_id(),
        started_at=Coalesce("started_at", Value(timezone.now(), output_field=DateTimeField())))
    return WorkflowRun.objects.filter(pk=run_id).first() if claimed else None


def run_finish(*, run: WorkflowRun, status: str, outputs: dict[str, Any], output: Any, error: dict | None,
               trace: list[dict[str, Any]]) -> WorkflowRun:
    """Store how a run ended (only a run still running: a second store changes nothing). A run a peer's sweep
    marked as crashed while this process, taken for dead (its heartbeat stalled), was still running it, is
    still this process's to finish."""
    run.status, run.outputs, run.output, run.error, run.trace = status, outputs, output, error, trace
    run.finished_at = timezone.now()
    changes = {"status": status, "outputs": outputs, "output": output, "error": error, "trace": trace,
               "finished_at": run.finished_at, "state": {}}
    stored = _finish_running(run.pk, changes)
    if not stored:  # rare: not running any more; still ours if a sweep took this process for dead
        swept_but_mine = Q(status=WorkflowRun.ERROR, process=current_process_id(), error__message=SWEPT_MESSAGE)
        stored = WorkflowRun.objects.filter(swept_but_mine, pk=run.pk).update(**changes)
    if stored:
        metrics.workflow_run_finished(status)  # a run's statuses are the model's choices: a bounded label
    return run


_FINISHED = ("status", "outputs", "output", "error", "trace", "finished_at", "state")


def _finish_running(pk: Any, changes: dict[str, Any]) -> int:
    """`UPDATE … SET <changes> WHERE pk AND status = running` by a statement written once (every run ends
    here; through the ORM it cost ~0.35 ms more of CPU): the number of rows changed (0 or 1)."""
    meta = WorkflowRun._meta
    sql = _statements.get(("finish", connection.vendor))
    if sql is None:
        quote = connection.ops.quote_name
        assignments = ", ".join(f"{quote(meta.get_field(name).column)} = %s" for name in _FINISHED)
        sql = _statements[("finish", connection.vendor)] = (
            f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s "
            f"AND {quote(meta.get_field('status').column)} = %s")
    values = [meta.get_field(name).get_db_prep_save(changes[name], connection) for name in _FINISHED]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, meta.pk.get_db_prep_value(pk, connection), WorkflowRun.RUNNING])
        return cursor.rowcount


SWEPT_MESSAGE = "The process running this run stopped (a crash or a kill) before it finished."


def runs_mark_crashed(dead: list[str], include_unowned: bool = False) -> int:
    """Mark the runs that these dead processes left `running` as `error` (agentsite.core.processes sweeps;
    include_unowned: runs that name no process too, left by a release before processes were recorded)."""
    owned = owned_by(dead, include_unowned)
    count = WorkflowRun.objects.filter(owned, status=WorkflowRun.RUNNING).update(
        status=WorkflowRun.ERROR, finished_at=timezone.now(),
        error={"node": None, "message": SWEPT_MESSAGE})
    if count:
        logger.warning("Marked %d workflow run(s) left running by a stopped process as error", count)
    return count


# --- retention ------------------------------------------------------------------------------------------

LIVE = (WorkflowRun.QUEUED, WorkflowRun.RUNNING, WorkflowRun.WAITING)  # never pruned: something will still write
PRUNE_SCHEDULE_NAME = "agentsite workflow run retention"


def runs_prune(*, now: datetime | None = None) -> int:
    """Delete each owner's runs past AGENTSITE_WORKFLOW_RUNS_KEEP (their newest that many stay) and, when
    AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS is set, those older than that; a live run (queued, running, waiting for
    approvals) is never deleted, nor counted out. 0 turns a rule off. The number of runs deleted."""
    keep = int(getattr(settings, "AGENTSITE_WORKFLOW_RUNS_KEEP", 1000))
    days = int(getattr(settings, "AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS", 0))
    finished = WorkflowRun.objects.exclude(status__in=LIVE)
    deleted = 0
    if days > 0:
        deleted += finished.filter(created_at__lt=(now or timezone.now()) - timedelta(days=days)).delete()[1].get(
            WorkflowRun._meta.label, 0)
    if keep > 0:
        crowded = (WorkflowRun.objects.values("owner_id").annotate(runs=Count("id")).filter(runs__gt=keep)
                   .values_list("owner_id", flat=True))
        for owner_id in list(crowded):
            newest = WorkflowRun.objects.filter(owner_id=owner_id).order_by("-created_at", "-id").values("id")[:keep]
            deleted += finished.filter(owner_id=owner_id).exclude(id__in=newest).delete()[1].get(
                WorkflowRun._meta.label, 0)
    if deleted:
        logger.info("Workflow run retention deleted %d run(s)", deleted)
    return deleted


def runs_prune_schedule_ensure() -> str:
    """The hourly django-q2 schedule that runs runs_prune (made or updated at service start)."""
    Schedule.objects.update_or_create(name=PRUNE_SCHEDULE_NAME, defaults={
        "func": "workflows.tasks.workflow_runs_prune_task", "repeats": -1, "schedule_type": Schedule.HOURLY,
        "cron": None})
    return "hourly"
