"""Workflows data: a workflow, its nodes and edges, and its runs (each keeping the graph it ran)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from organisation.models import GrantBase, Shareable


class Workflow(Shareable):
    """A named graph of nodes, owned by one user; its name is unique for that user (it is also a /v1 model
    `workflow:<name>` and a tool `workflow__<name>` of its owner). Its access rule (`visibility`, `grants`:
    organisation.policy) lets viewers run it and editors also save versions."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workflows")
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveIntegerField(default=0, help_text=(
        "The number of its latest version (WorkflowVersion): each save makes the next one."))

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="workflow_owner_name_unique")]

    def __str__(self) -> str:
        return self.name


class WorkflowGrant(GrantBase):
    """One grant of a workflow's access rule (organisation.policy)."""

    resource = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="grants")

    class Meta:
        constraints = GrantBase.grant_constraints("workflow")


class WorkflowNode(models.Model):
    """One node. `node_id` is the id edges and branches name (the client's own, or assigned). `type` names a
    node type of the registry (workflows/nodes.py), checked when the workflow is saved, not by the column."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="nodes")
    node_id = models.CharField(max_length=64)
    type = models.CharField(max_length=20)
    name = models.CharField(max_length=64)
    config = models.JSONField(default=dict, blank=True)
    position_x = models.FloatField(default=0.0)
    position_y = models.FloatField(default=0.0)
    order = models.PositiveIntegerField(default=0)  # the order the client gave

    class Meta:
        ordering = ["workflow_id", "order"]
        constraints = [
            models.UniqueConstraint(fields=["workflow", "node_id"], name="workflow_node_id_unique"),
            models.UniqueConstraint(fields=["workflow", "name"], name="workflow_node_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"


class WorkflowEdge(models.Model):
    """An edge from one node to another, by their node ids."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="edges")
    source = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["workflow_id", "order"]
        constraints = [models.UniqueConstraint(fields=["workflow", "source", "target"], name="workflow_edge_unique")]

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


class WorkflowVersion(models.Model):
    """One saved state of a workflow, never changed once written: each save (create, update, node add, import,
    restore, an admin edit) makes the next number, 1 first. A run records the number it ran and runs that
    version's graph; a restore makes a new version equal to an older one (numbers only grow)."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    description = models.TextField(blank=True, default="")
    graph = models.JSONField(default=dict, help_text="{nodes, edges} as the API shows them.")
    note = models.CharField(max_length=200, blank=True, default="", help_text="What made it (create, update, ...).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workflow_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["workflow", "number"], name="workflow_version_unique")]

    def __str__(self) -> str:
        return f"{self.workflow_id} v{self.number}"


class WorkflowRun(models.Model):
    """One run. It keeps the graph it ran, so later edits of the workflow do not change its record. Its `owner`
    is who started it (the workflow's owner, or a user it is shared with): the run acts with that user's rights
    (their model access, budget, tools and knowledge) and is theirs to read."""

    QUEUED, RUNNING, SUCCESS, ERROR, CANCELLED = "queued", "running", "success", "error", "cancelled"
    WAITING = "waiting"  # stopped at approval nodes: nothing runs it until they are decided (queued again then)
    STATUSES = [(status, status) for status in (QUEUED, RUNNING, WAITING, SUCCESS, ERROR, CANCELLED)]
    FINAL = (SUCCESS, ERROR, CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="runs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workflow_runs")
    status = models.CharField(max_length=12, choices=STATUSES, default=QUEUED)
    input = models.TextField(blank=True, default="")
    graph = models.JSONField(default=dict, help_text="The nodes and edges this run ran.")
    version = models.PositiveIntegerField(null=True, blank=True, help_text=(
        "The workflow version it ran (null: a run from before versions)."))
    outputs = models.JSONField(default=dict, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True, help_text="{node, message} when the run failed.")
    trace = models.JSONField(default=list, blank=True)
    state = models.JSONField(default=dict, blank=True, help_text=(
        "A waiting run's engine state: {done: {node id: {output, targets}}}, what a resumed run replays."))
    created_at = models.DateTimeField(auto_now_add=True)
    process = models.CharField(max_length=200, blank=True, default="", help_text=(
        "The process running it (agentsite.core.processes): if that process dies, the run is marked error."))
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Who started it, as its model calls and tools see it wherever it runs (queued, resumed after approvals).
    acting_key = models.CharField(max_length=64, blank=True, default="", help_text=(
        "The API key that started the run: its model calls count to that key (and its budget). Empty: none."))
    admin_rights = models.BooleanField(null=True, blank=True, default=None, help_text=(
        "False: started by a caller without admin rights (an API key without the admin scope), so its tools "
        "never get them. Null: the owner's own rights."))

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["workflow", "-created_at"], name="workflow_run_recent"),
                   models.Index(fields=["status"], name="workflow_run_status")]

    def __str__(self) -> str:
        return f"{self.workflow_id} {self.status} {self.created_at:%Y-%m-%d %H:%M:%S}"


class WorkflowApproval(models.Model):
    """A decision a run waits for at one approval node. Pending until an approver (or its timeout) decides it;
    decided once (a second decision is refused). Its approvers are users: only they see and decide it."""

    PENDING, APPROVED, REJECTED = "pending", "approved", "rejected"
    STATUSES = [(status, status) for status in (PENDING, APPROVED, REJECTED)]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="approvals")
    node_id = models.CharField(max_length=64)
    node_name = models.CharField(max_length=64)
    prompt = models.TextField(blank=True, default="")
    approvers = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="workflow_approvals")
    status = models.CharField(max_length=10, choices=STATUSES, default=PENDING)
    on_timeout = models.CharField(max_length=10, default="reject")
    expires_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True, default="")
    data = models.JSONField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "expires_at"], name="workflow_approval_due")]

    def __str__(self) -> str:
        return f"{self.node_name} {self.status}"

    @property
    def decision(self) -> str | None:
        return {self.APPROVED: "approve", self.REJECTED: "reject"}.get(self.status)

    def output(self) -> dict:
        """The approval node's output once decided."""
        return {"decision": self.decision, "comment": self.comment, "data": self.data,
                "by": self.decided_by.get_username() if self.decided_by_id and self.decided_by else None}


class WorkflowTrigger(models.Model):
    """A way for another system to start the workflow: `POST /hooks/<id>` (kind "webhook").

    The secret is never stored: it is derived from the server's SECRET_KEY and this trigger's random `nonce`
    (workflows.triggers.secret_of), so the HMAC check has the secret itself while a copy of the database alone
    gives none. A rotation draws a new nonce, so the old secret stops working at once, in every process (each
    request reads the trigger's row). Changing SECRET_KEY changes every trigger's secret (rotate them after).
    """

    WEBHOOK = "webhook"
    SYNC, ASYNC = "sync", "async"
    MODES = [(SYNC, SYNC), (ASYNC, ASYNC)]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="triggers")
    kind = models.CharField(max_length=20, default=WEBHOOK, choices=[(WEBHOOK, WEBHOOK)])
    enabled = models.BooleanField(default=True)
    mode = models.CharField(max_length=5, choices=MODES, default=SYNC)
    version = models.PositiveIntegerField(null=True, blank=True, help_text="Run this version (null: the latest).")
    rate_per_minute = models.PositiveIntegerField(default=60, help_text="Requests a minute it accepts.")
    nonce = models.CharField(max_length=64, help_text="With SECRET_KEY, derives the secret (never the secret).")
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)
    # The API key whose request made it or last rotated its secret (null: a dashboard token): its runs are that
    # key's (its budget, no admin rights without the scope) and stop when the key is revoked.
    created_by_key = models.ForeignKey("accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE,
                                       related_name="+", help_text="The API key its secret was handed to.")

    class Meta:
        ordering = ["workflow_id", "created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class WebhookSignature(models.Model):
    """A webhook signature already accepted (the replay store without Redis): refused if seen again until it
    expires, after the timestamp window has closed on it."""

    digest = models.CharField(max_length=64, primary_key=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.digest
