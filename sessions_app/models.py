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
    # The last message of the selected path (the branch the next turn continues and the page shows); null
    # only before the first message. Every turn moves it to its reply; PATCH {current} moves it to another branch.
    current = models.ForeignKey("ChatMessage", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                help_text="The last message of the selected path.")
    pinned = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)
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
    """One message of a session's tree. An assistant message holds the whole turn: its tool calls, each with its
    result and duration. `parent` is the message it follows (null: a first question); siblings are the edits of
    a question or the regenerations of a reply, and a turn's history is the path from the root to its parent."""

    ROLES = [("user", "user"), ("assistant", "assistant"), ("tool", "tool"), ("system", "system")]
    # `streaming`: the reply is being generated (its content is checkpointed as it goes); if the process that
    # generates it dies, it becomes `interrupted` (agentsite.core.processes). `stopped`: the user stopped it
    # (POST .../stop, sessions_app.stops), keeping what was generated.
    STATUSES = [("complete", "complete"), ("interrupted", "interrupted"), ("error", "error"),
                ("streaming", "streaming"), ("stopped", "stopped")]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()  # order of creation within the session; timestamps can tie
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    role = models.CharField(max_length=10, choices=ROLES)
    content = models.TextField(blank=True, default="")
    attachments = models.JSONField(default=list, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    sources = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    finish_reason = models.CharField(max_length=30, blank=True, default="")
    status = models.CharField(max_length=12, choices=STATUSES, default="complete")
    # An assistant reply's: the catalogue entry that answered, the agent's slug, the time to its first token.
    model = models.CharField(max_length=300, blank=True, default="")
    agent = models.CharField(max_length=80, blank=True, default="")
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    process = models.CharField(max_length=200, blank=True, default="",
                               help_text="The process generating a streaming reply (agentsite.core.processes).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="chat_message_seq_unique")]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"
