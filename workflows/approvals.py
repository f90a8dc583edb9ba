"""Approvals: what a run waiting at approval nodes asks, who may decide it, the decision, and the resume."""

# Invariants (tests/workflows/test_approvals.py):
# - a run stops `waiting` with one pending approval per approval node it reached; nothing runs it meanwhile
#   (no task, thread or connection: its state is in the run record, `WorkflowRun.state`);
# - only an approval's approvers see it (GET /api/approvals) or decide it; anyone else gets 404;
# - an approval is decided once: the decision is a conditional update, so a second one (or one racing a
#   timeout) is refused with 409 `conflict`;
# - when the last pending approval of a run is decided, the run is queued again (in the decision's
#   transaction, `enqueue_with_commit`) and any worker of the task queue resumes it on the graph it started
#   with (the run's own snapshot), replaying the finished nodes;
# - an approval with `timeout_s` has a one-off django-q2 schedule at its expiry that decides it `on_timeout`
#   (by: null) when nobody decided it first.

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django_q.models import Schedule

from agentsite.core.errors import AppError
from agentsite.core.processes import current_process_id
from agentsite.core.taskqueue import enqueue_with_commit
from workflows.models import Workflow, WorkflowApproval, WorkflowRun
from workflows.services import SWEPT_MESSAGE

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

DECISIONS = {"approve": WorkflowApproval.APPROVED, "reject": WorkflowApproval.REJECTED}
TIMEOUT_TASK = "workflows.tasks.approval_timeout_task"
RESUME_TASK = "workflows.tasks.workflow_run_task"
MAX_COMMENT = 10_000


def schedule_name(approval_id: uuid.UUID | str) -> str:
    return f"workflow-approval:{approval_id}"


def run_wait(*, run: WorkflowRun, outputs: dict[str, Any], output: Any, trace: list[dict[str, Any]],
             state: dict[str, Any], pending: dict[str, dict[str, Any]]) -> WorkflowRun:
    """Store a run that stopped at approval nodes: `waiting`, its state, and one pending approval per node
    (with its approvers and its timeout's schedule). Only a run still running is changed."""
    graph_names = {item["id"]: item["name"] for item in run.graph.get("nodes", [])}
    swept_but_mine = Q(status=WorkflowRun.ERROR, process=current_process_id(), error__message=SWEPT_MESSAGE)
    with transaction.atomic():
        changed = WorkflowRun.objects.filter(Q(status=WorkflowRun.RUNNING) | swept_but_mine, pk=run.pk).update(
            status=WorkflowRun.WAITING, outputs=outputs, output=output, error=None, trace=trace, state=state,
            process="")
        run.status, run.outputs, run.output, run.trace, run.state = WorkflowRun.WAITING, outputs, output, trace, state
        if not changed:
            return run
        asked = set(WorkflowApproval.objects.filter(run=run).values_list("node_id", flat=True))
        for node_id, ask in pending.items():
            if node_id not in asked:
                _approval_create(run, node_id, graph_names.get(node_id, node_id), ask)
    return run


def _approval_create(run: WorkflowRun, node_id: str, node_name: str, ask: dict[str, Any]) -> WorkflowApproval:
    users = list(get_user_model().objects.filter(username__in=ask.get("approvers") or [], is_active=True))
    if not users:  # none named (or none of the names is an active user): the workflow's owner decides
        if ask.get("approvers"):
            logger.warning("Approval node %s of run %s names no active user; its owner decides", node_name, run.pk)
        # The workflow's owner, not the run's: a user the workflow is shared with does not approve their own run.
        users = [Workflow.objects.only("owner_id").get(pk=run.workflow_id).owner_id]
    timeout = ask.get("timeout_s")
    approval = WorkflowApproval.objects.create(
        run=run, node_id=node_id, node_name=node_name, prompt=ask.get("prompt", ""),
        on_timeout=ask.get("on_timeout") or "reject",
        expires_at=timezone.now() + timedelta(seconds=timeout) if timeout else None)
    approval.approvers.set(users)
    if approval.expires_at is not None:
        Schedule.objects.create(name=schedule_name(approval.pk), func=TIMEOUT_TASK, args=repr(str(approval.pk)),
                                schedule_type=Schedule.ONCE, repeats=-1, next_run=approval.expires_at)
    return approval


# --- selectors ----------------------------------------------------------------------------------------

def approvals_for(*, user: AbstractBaseUser, status: str | None = WorkflowApproval.PENDING,
                  ) -> QuerySet[WorkflowApproval]:
    """The approvals this user may decide (pending ones unless `status` says otherwise), newest first."""
    found = WorkflowApproval.objects.filter(approvers=user)
    if status:
        found = found.filter(status=status)
    return found.select_related("run__workflow", "decided_by").prefetch_related("approvers")


def approvals_of_run(*, run_id: uuid.UUID) -> list[WorkflowApproval]:
    return list(WorkflowApproval.objects.filter(run_id=run_id).select_related("run__workflow", "decided_by")
                .prefetch_related("approvers").order_by("created_at"))


def decisions_of_run(*, run_id: uuid.UUID) -> dict[str, Any]:
    """The decided approval nodes of a run: node id -> the node's output."""
    return {approval.node_id: approval.output() for approval in WorkflowApproval.objects.filter(
        run_id=run_id).exclude(status=WorkflowApproval.PENDING).select_related("decided_by")}


# --- decisions ------------------------------------------------------------------------------------------

def approval_decide(*, approval_id: uuid.UUID, user: AbstractBaseUser, decision: str, comment: str = "",
                    data: Any = None) -> WorkflowApproval:
    """Decide an approval the user is named on. Raises AppError 404 (not one of its approvers, or no such
    approval), 409 `conflict` (already decided)."""
    approval = WorkflowApproval.objects.filter(pk=approval_id, approvers=user).first()
    if approval is None:
        raise AppError("not_found", "No such approval (or you are not one of its approvers).", 404)
    if not _decide(approval, DECISIONS[decision], by=user, comment=comment, data=data):
        raise AppError("conflict", f"This approval was already decided ({approval.decision}).", 409)
    return approvals_of_run_one(approval.pk)


def approvals_of_run_one(approval_id: uuid.UUID) -> WorkflowApproval:
    return WorkflowApproval.objects.select_related("run__workflow", "decided_by").prefetch_related(
        "approvers").get(pk=approval_id)


def approval_time_out(*, approval_id: str) -> str:
    """Decide an approval past its expiry as its `on_timeout` says (the schedule's task); nothing when decided."""
    approval = WorkflowApproval.objects.filter(pk=approval_id).first()
    if approval is None or approval.status != WorkflowApproval.PENDING:
        return "decided already"
    if approval.expires_at and approval.expires_at > timezone.now():
        return "not due"
    status = DECISIONS.get(approval.on_timeout, WorkflowApproval.REJECTED)
    seconds = (approval.expires_at - approval.created_at).total_seconds() if approval.expires_at else 0
    done = _decide(approval, status, by=None, comment=f"No decision within {seconds:g} seconds: {approval.on_timeout}"
                   f"{'d' if approval.on_timeout == 'approve' else 'ed'} by its timeout.", data=None)
    return approval.decision or "" if done else "decided already"


def _decide(approval: WorkflowApproval, status: str, *, by: AbstractBaseUser | None, comment: str,
            data: Any) -> bool:
    """Decide it once, and queue its run again once nothing of it is pending. False: decided before."""
    now = timezone.now()
    with transaction.atomic():
        # The run's row serializes the decisions of its approvals: the last one decided sees no other pending.
        WorkflowRun.objects.select_for_update().filter(pk=approval.run_id).first()
        changed = WorkflowApproval.objects.filter(pk=approval.pk, status=WorkflowApproval.PENDING).update(
            status=status, decided_by=by, decided_at=now, comment=comment, data=data)
        if not changed:
            return False
        approval.status, approval.decided_by, approval.decided_at = status, by, now
        approval.comment, approval.data = comment, data
        if approval.expires_at is not None:
            Schedule.objects.filter(name=schedule_name(approval.pk)).delete()
        if not WorkflowApproval.objects.filter(run_id=approval.run_id, status=WorkflowApproval.PENDING).exists():
            queued = WorkflowRun.objects.filter(pk=approval.run_id, status=WorkflowRun.WAITING).update(
                status=WorkflowRun.QUEUED, process="")
            if queued:
                enqueue_with_commit(RESUME_TASK, [(str(approval.run_id),)])
    return True
