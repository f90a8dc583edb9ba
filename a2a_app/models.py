"""A2A's rows: the tasks this server's agents run for A2A callers (with their event log, so that any process can
answer for a task and follow it), and the remote A2A agents registered as tools.

Invariants:
- A task belongs to one principal, `owner` (`user:<id>`): every read filters by it, so another caller's task id
  is "not found". `context_id` (one conversation) is looked up only with `owner` and `agent_slug`.
- `version` counts the task's writes (1 on the first); a write names the version it read and fails when another
  writer came first (compare-and-swap, a2a.server.cluster.VersionedTaskStore), except a cancel of an unended task.
- Each write that an event produced appends that event to A2ATaskEvent with the task's new version, in the same
  transaction: a process following the task reads the log in `seq` order from the version it last saw.
- A remote's `headers` values are sealed (agentsite.core.secretbox) and never returned by any API.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from organisation.models import GrantBase, Shareable

# A remote is the tool `a2a_<name>`: function names must match ^[a-zA-Z0-9_-]{1,64}$ on every upstream.
REMOTE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$"
remote_name_validator = RegexValidator(
    REMOTE_NAME_PATTERN, "Use 1-48 letters, digits, '-' or '_', starting with a letter or digit.")


class A2ATask(models.Model):
    """One A2A task: an agent's run for a caller (a2a_app.store). `task` is the SDK's Task as protobuf bytes, the
    one source of its state; `state`, `agent_slug` and `context_id` repeat what lookups filter on."""

    id = models.CharField(max_length=64, primary_key=True)
    owner = models.CharField(max_length=100)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    agent_slug = models.CharField(max_length=64)
    context_id = models.CharField(max_length=200)
    state = models.CharField(max_length=40)
    version = models.PositiveIntegerField(default=1)
    task = models.BinaryField()
    # The process running it (agentsite.core.processes' id), empty once it ended: a task whose process died is
    # failed by the sweep instead of staying `working` for ever.
    process = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "agent_slug", "context_id", "created_at"], name="a2a_task_context"),
                   models.Index(fields=["owner", "updated_at"], name="a2a_task_owner"),
                   models.Index(fields=["process"], name="a2a_task_process")]
        verbose_name = "A2A task"

    def __str__(self) -> str:
        return f"{self.id} ({self.agent_slug}, {self.state})"


class A2ATaskEvent(models.Model):
    """An event of a task, as the SDK's StreamResponse bytes, with the task version it produced."""

    seq = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(A2ATask, on_delete=models.CASCADE, related_name="events")
    version = models.PositiveIntegerField()
    data = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["task", "seq"], name="a2a_event_task_seq")]
        verbose_name = "A2A task event"

    def __str__(self) -> str:
        return f"{self.task_id} #{self.seq} (version {self.version})"


class A2ARemote(Shareable):
    """A remote A2A agent, registered by an admin and offered to agents as the tool `a2a_<name>`.

    Who may use it is the organisation's access rule (kind `a2a_remote`, as an MCP server: owner null, the
    deployment's; `viewer` grants only, since what it sends travels with the admin's headers). `card` is the
    agent card as fetched and validated at registration (or refresh); `headers` are sent with every request to
    it, their values sealed and write-only.
    """

    name = models.CharField(max_length=48, unique=True, validators=[remote_name_validator])
    url = models.CharField(max_length=2000)
    headers = models.JSONField(default=dict, blank=True)
    card = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+", help_text="Always null: the deployment's (its admins') remote.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "A2A remote agent"

    def __str__(self) -> str:
        return self.name


class A2ARemoteGrant(GrantBase):
    """A user or a group who may use the remote (role `viewer` only) while its visibility is `shared`."""

    resource = models.ForeignKey(A2ARemote, on_delete=models.CASCADE, related_name="grants")

    class Meta:
        constraints = GrantBase.grant_constraints("a2a_remote")
        verbose_name = "A2A remote grant"
