"""Reads of the scheduler, always scoped to the owner."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.db.models import QuerySet

from agentsite.core.errors import AppError
from scheduler.models import ScheduledTask, TaskRun

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def task_list_for(*, owner: AbstractBaseUser) -> QuerySet[ScheduledTask]:
    """The owner's tasks, each with its agent (for `agent_slug`)."""
    return ScheduledTask.objects.filter(owner=owner).select_related("agent").order_by("name", "created_at")


def task_get_for(*, owner: AbstractBaseUser, task_id: uuid.UUID) -> ScheduledTask:
    """The owner's task; raises AppError 404 for another user's or a missing one (ids do not leak)."""
    task = task_list_for(owner=owner).select_related("owner").filter(pk=task_id).first()
    if task is None:
        raise AppError("not_found", "No such scheduled task.", 404)
    return task


def run_list_for(*, owner: AbstractBaseUser, task: ScheduledTask | None = None) -> QuerySet[TaskRun]:
    """The owner's runs, newest first (of one task when given)."""
    runs = TaskRun.objects.filter(task__owner=owner).select_related("task")
    return (runs.filter(task=task) if task is not None else runs).order_by("-created_at")
