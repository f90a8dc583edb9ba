"""Workflow run retention: each owner keeps their newest AGENTSITE_WORKFLOW_RUNS_KEEP runs (and, with
AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS, none older), pruned hourly by the task queue; a live run (queued,
running, waiting for approvals) is never deleted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import Schedule

from workflows import services
from workflows.models import WorkflowRun
from workflows.tasks import workflow_runs_prune_task

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def runs_of(user, statuses: list[str], *, days_old: float = 0.0) -> list[WorkflowRun]:
    """Runs of `user`'s workflow, one per status, the first the oldest (an hour apart, `days_old` back)."""
    workflow = services.workflow_create(owner=user, name=f"w{WorkflowRun.objects.count()}")
    made = []
    for index, status in enumerate(statuses):
        run = WorkflowRun.objects.create(workflow=workflow, owner=user, status=status, input="x")
        created = NOW - timedelta(days=days_old, hours=len(statuses) - index)
        WorkflowRun.objects.filter(pk=run.pk).update(created_at=created)
        made.append(run)
    return made


def left(user) -> set:
    return set(WorkflowRun.objects.filter(owner=user).values_list("pk", flat=True))


def test_an_owner_at_the_limit_keeps_every_run_and_one_past_it_loses_the_oldest(owner, settings):
    settings.AGENTSITE_WORKFLOW_RUNS_KEEP = 3
    runs = runs_of(owner, ["success", "error", "cancelled"])
    assert services.runs_prune(now=NOW) == 0 and left(owner) == {run.pk for run in runs}

    newest = runs_of(owner, ["success"])[0]
    assert services.runs_prune(now=NOW) == 1
    assert left(owner) == {runs[1].pk, runs[2].pk, newest.pk}


def test_pruning_keeps_the_newest_n_and_never_a_live_run_nor_another_owners(owner, other_user, settings):
    settings.AGENTSITE_WORKFLOW_RUNS_KEEP = 2
    live = runs_of(owner, ["queued", "running", "waiting"], days_old=30)  # the oldest of all
    finished = runs_of(owner, ["success", "error", "success", "cancelled"])
    others = runs_of(other_user, ["success", "success"])

    assert services.runs_prune(now=NOW) == 2  # of the owner's 7 runs the newest 2 stay, and the 3 live ones
    assert left(owner) == {run.pk for run in live} | {finished[2].pk, finished[3].pk}
    assert left(other_user) == {run.pk for run in others}


def test_a_newest_run_that_is_live_counts_among_the_n_kept(owner, settings):
    settings.AGENTSITE_WORKFLOW_RUNS_KEEP = 2
    runs = runs_of(owner, ["success", "success", "success", "waiting"])
    assert services.runs_prune(now=NOW) == 2
    assert left(owner) == {runs[2].pk, runs[3].pk}


def test_an_age_limit_deletes_older_finished_runs_only(owner, settings):
    settings.AGENTSITE_WORKFLOW_RUNS_KEEP = 0  # off: only the age rule
    settings.AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS = 30
    old = runs_of(owner, ["success", "waiting"], days_old=31)
    recent = runs_of(owner, ["success"], days_old=29)
    assert services.runs_prune(now=NOW) == 1
    assert left(owner) == {old[1].pk, recent[0].pk}


def test_both_rules_off_keep_everything(owner, settings):
    settings.AGENTSITE_WORKFLOW_RUNS_KEEP = 0
    settings.AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS = 0
    runs = runs_of(owner, ["success"] * 3, days_old=400)
    assert services.runs_prune(now=NOW) == 0 and len(left(owner)) == len(runs)


def test_the_task_queue_prunes_hourly(owner, settings):
    assert services.runs_prune_schedule_ensure() == "hourly"
    schedule = Schedule.objects.get(name=services.PRUNE_SCHEDULE_NAME)
    assert (schedule.func, schedule.schedule_type) == ("workflows.tasks.workflow_runs_prune_task", Schedule.HOURLY)
    settings.AGENTSITE_WORKFLOW_RUNS_KEEP = 1
    runs_of(owner, ["success", "success"])
    assert workflow_runs_prune_task() == 1
