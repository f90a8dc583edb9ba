"""Named agents: instructions, a model, a tool allowlist and knowledge, shared through the organisation's rule.

An agent is served as `agent:<slug>` on every door (/v1, Responses, Messages, MCP `ask_<slug>`, chat sessions,
scheduled tasks, workflow `llm` nodes). Each save makes a version (`AgentVersion`, never changed once written);
`agent:<slug>@<n>` runs version n. The agent `default` is the deployment's (no owner, visible to everyone,
edited by admins): /api/config's agent fields are its fields.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from organisation.models import EVERYONE, GrantBase, Shareable

SLUG_REGEX = r"^[a-z0-9_-]{1,64}$"
DEFAULT_SLUG = "default"
MAX_STARTERS = 6
# What a version leaves out: who the agent is, whose it is, who may use it, and the row's bookkeeping.
NOT_VERSIONED = frozenset({"id", "slug", "owner", "visibility", "version", "created_at", "updated_at"})


def _no_tools() -> list[str]:
    return []


class Agent(Shareable):
    """One named agent. `tools` is its allowlist (built-in and plugin tool names, `<server>/<tool>`,
    `workflow:<name>`, `*` for every tool its caller may use; empty: none); `knowledge` the ids of the
    collections searched on each turn, with the owner's read rights."""

    slug = models.CharField(max_length=64, unique=True, validators=[RegexValidator(SLUG_REGEX)])
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True, default="")
    instructions = models.TextField(blank=True, default="")
    model = models.CharField(max_length=300, blank=True, default="",
                             help_text="An alias or <connection>/<model>; empty: the deployment's default model.")
    tools = models.JSONField(default=_no_tools, blank=True)
    knowledge = models.JSONField(default=list, blank=True)
    temperature = models.FloatField(default=0.7, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)])
    max_tokens = models.PositiveIntegerField(default=1024, validators=[MinValueValidator(1)])
    starters = models.JSONField(default=list, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="agents", help_text="Null: the deployment's (the agent `default`).")
    version = models.PositiveIntegerField(default=0, help_text="The number of its latest version.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_default(self) -> bool:
        return self.slug == DEFAULT_SLUG

    def fields(self) -> dict:
        """The versioned fields as a version stores them."""
        return {name: getattr(self, name) for name in VERSIONED_FIELDS}


# The fields a version keeps (and a restore brings back): everything that shapes a reply, which is every other
# column of the agent, in the model's order (a field added to Agent is versioned unless NOT_VERSIONED names it).
VERSIONED_FIELDS: tuple[str, ...] = tuple(field.name for field in Agent._meta.concrete_fields
                                          if field.name not in NOT_VERSIONED)


class AgentGrant(GrantBase):
    """One grant of an agent's access rule (organisation.policy): a viewer chats with it, an editor changes it."""

    resource = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="grants")

    class Meta:
        constraints = GrantBase.grant_constraints("agent")


class AgentVersion(models.Model):
    """One saved state of an agent: each save (create, update, restore, an admin edit, /api/config) makes the next
    number, 1 first; a restore makes a new version equal to an older one (numbers only grow)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    data = models.JSONField(default=dict, help_text="The versioned fields as they were saved.")
    note = models.CharField(max_length=200, blank=True, default="", help_text="What made it (create, update, ...).")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["agent", "number"], name="agent_version_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} v{self.number}"


__all__ = ["DEFAULT_SLUG", "EVERYONE", "MAX_STARTERS", "SLUG_REGEX", "VERSIONED_FIELDS", "Agent", "AgentGrant",
           "AgentVersion"]
