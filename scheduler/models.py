"""Scheduler data: cron tasks and their runs.

Invariants (enforced here, relied on by the tick):
- `next_run_at` is the task's next fire time in UTC while it is enabled, and is indexed (partially: enabled
  tasks only), so a tick selects due tasks without evaluating any cron expression.
- A scheduled occurrence runs at most once: `(task, scheduled_for)` is unique for runs the schedule made
  (trigger `schedule` or `catch_up`), so two ticks or two clusters racing for one occurrence insert one
  row, and the loser inserts nothing. Manual runs are outside that constraint.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class ScheduledTask(models.Model):
    RUN_ONCE, SKIP = "run_once", "skip"
    MISSED = [(RUN_ONCE, "run once"), (SKIP, "skip")]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scheduled_tasks")
    name = models.CharField(max_length=200)
    cron = models.CharField(max_length=200, help_text="5 fields: minute hour day-of-month month day-of-week.")
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA zone, e.g. Europe/Paris.")
    prompt = models.TextField()
    enabled = models.BooleanField(default=True)
    session = models.ForeignKey("sessions_app.ChatSession", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="scheduled_tasks")
    workflow = models.ForeignKey("workflows.Workflow", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="scheduled_tasks")
    workflow_version = models.PositiveIntegerField(null=True, blank=True, help_text=(
        "Run this version of the workflow (null: its latest at each run)."))
    missed = models.CharField(max_length=10, choices=MISSED, default=RUN_ONCE)
    # The model the prompt goes to (a catalogue entry or alias, agentsite.agent.routing); empty: the session's,
    # else the agent's default. Not for a workflow task: its llm nodes name their own.
    model = models.CharField(max_length=300, blank=True, default="")
    # The named agent the prompt goes to (its instructions, tools, knowledge; `model` above still overrides its
    # model); null: the agent `default` (also when the agent it named is deleted). Not for a workflow task.
    agent = models.ForeignKey("agents_app.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                              help_text="The agent the prompt goes to (null: the agent `default`).")
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The API key whose request made it or last changed it (null: a dashboard token): its runs are that key's
    # (its budget) and stop when the key is revoked.
    created_by_key = models.ForeignKey("accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE,
                                       related_name="+", help_text="The API key that last wrote it.")

    class Meta:
        ordering = ["name", "created_at"]
        indexes = [
            models.Index(fields=["next_run_at"], condition=Q(enabled=True), name="scheduler_task_due"),
            models.Index(fields=["owner", "name"], name="scheduler_task_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} {self.timezone})"

    @property
    def agent_slug(self) -> str:
        """Its agent's slug, `default` when none is stored (read with the agent: select_related it)."""
        return self.agent.slug if self.agent_id is not None and self.agent is not None else "default"


class TaskRun(models.Model):
    SCHEDULE, MANUAL, CATCH_UP = "schedule", "manual", "catch_up"
    TRIGGERS = [(SCHEDULE, "schedule"), (MANUAL, "manual"), (CATCH_UP, "catch up")]
    QUEUED, RUNNING, SUCCESS, ERROR, SKIPPED = "queued", "running", "success", "error", "skipped"
    STATUSES = [(status, status) for status in (QUEUED, RUNNING, SUCCESS, ERROR, SKIPPED)]
    ACTIVE = (QUEUED, RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    task = models.ForeignKey(ScheduledTask, on_delete=models.CASCADE, related_name="runs")
    trigger = models.CharField(max_length=10, choices=TRIGGERS)
    scheduled_for = models.DateTimeField(help_text="The occurrence this run belongs to (UTC).")
    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
    output = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    process = models.CharField(max_length=200, blank=True, default="", help_text=(
        "The process running it (agentsite.core.processes): if that process dies, the run is marked error."))
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(
            fields=["task", "scheduled_for"], condition=~Q(trigger="manual"), name="scheduler_run_once_per_occurrence")]
        indexes = [models.Index(fields=["task", "-created_at"], name="scheduler_run_recent"),
                   models.Index(fields=["status"], name="scheduler_run_status")]

    def __str__(self) -> str:
        return f"{self.task_id} {self.trigger} {self.scheduled_for:%Y-%m-%d %H:%M} {self.status}"
