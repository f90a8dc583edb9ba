"""The named agent a chat session (or a scheduled task) talks to: which agent a caller may choose, and the settings
a run of it uses for that caller (agentsite.agent.agents: `agent:<slug>`, resolved with the caller's access).

A slug names an agent the caller may use, or it is refused as if there were no such agent (404 `not_found`
naming `agent`): another user's private agent and a missing one are indistinguishable. The agent `default` is
the deployment's and its settings are the runtime's own (agentsite.agent.config.get_settings, which its fields
mirror); any other agent's are its own (instructions, model, tool allowlist, collections read with its owner's
rights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents_app.models import Agent
from agentsite.agent import agents
from agentsite.agent.config import AgentSettings
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

DEFAULT_AGENT = agents.DEFAULT_SLUG


def unavailable(slug: str, message: str | None = None) -> AppError:
    """404 `not_found` naming `agent` (details {"agent": [...]})."""
    why = message or f"No agent {slug!r} that you may use (GET /api/agents lists them)."
    return AppError("not_found", why, 404, {"agent": [why]})


def settings_now(user: AbstractBaseUser | None, slug: str) -> AgentSettings:
    """The settings a run of agent `slug` uses for `user` (sync: on a database thread). Raises AppError 404
    `not_found` naming `agent` when the user may not use it (or it does not exist, or `slug` is no slug: a pinned
    `<slug>@<n>` is not taken here)."""
    try:
        return agents.run_settings_now(user, slug)
    except AppError as exc:
        if exc.code == "model_not_found":
            raise unavailable(slug) from None
        raise


def agent_chosen(user: AbstractBaseUser, slug: str) -> Any:
    """The agents_app.Agent row `slug` names, checked as settings_now checks it (for a session's or a task's
    `agent` field). Raises the same 404."""

    settings_now(user, slug)
    agent = Agent.objects.filter(slug=slug).first()
    if agent is None:  # deleted since it was resolved
        raise unavailable(slug)
    return agent


__all__ = ["DEFAULT_AGENT", "agent_chosen", "settings_now", "unavailable"]
