from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

DEFAULT_AGENT = "default"  # the agent a session without one of its own talks to (agents_app: the deployment's)


class ChatSession(models.Model):
    """A conversation of one user with the agent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions")
    name = models.CharField(max_length=200, default="New chat")
    # The model its turns use (a catalogue entry or alias, agentsite.agent.routing); empty: the agent's default.
    model = models.CharField(max_length=300, blank=True, default="")
    # The named agent its turns run (its instructions, tools and knowledge); null: the agent `default` (also
    # when the agent it named is deleted).
    agent = models.ForeignKey("agents_app.Agent", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                              help_text="The agent its turns use (null: the agent `default`).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.name

    @property
    def agent_slug(self) -> str:
        """Its agent's slug, `default` when none is stored (read with the agent: select_related it)."""
        return self.agent.slug if self.agent_id is not None and self.agent is not None else DEFAULT_AGENT


class ChatMessage(models.Model):
    """One message. An assistant message holds the whole turn: its tool calls, each with its result."""

    ROLES = [("user", "user"), ("assistant", "assistant"), ("tool", "tool"), ("system", "system")]
    # `streaming`: the reply is being generated (its content is checkpointed as it goes); if the process that
    # generates it dies, it becomes `interrupted` (agentsite.core.processes).
    STATUSES = [("complete", "complete"), ("interrupted", "interrupted"), ("error", "error"),
                ("streaming", "streaming")]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()  # order within the session; timestamps can tie
    role = models.CharField(max_length=10, choices=ROLES)
    content = models.TextField(blank=True, default="")
    attachments = models.JSONField(default=list, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    sources = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    finish_reason = models.CharField(max_length=30, blank=True, default="")
    status = models.CharField(max_length=12, choices=STATUSES, default="complete")
    process = models.CharField(max_length=200, blank=True, default="",
                               help_text="The process generating a streaming reply (agentsite.core.processes).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="chat_message_seq_unique")]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"
