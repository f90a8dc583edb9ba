"""What the A2A door reads of agents: whether a caller may use one, its settings for a run, its card's facts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from a2a_app.server.cards import AgentFacts
from agents_app.models import Agent
from agentsite.agent import agents
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def _not_found(slug: str) -> AppError:
    return AppError("not_found", f"No agent {slug!r} that you may use at this A2A endpoint.", 404)


async def run_settings(user: AbstractBaseUser, slug: str) -> Any:
    """The settings a run of agent `slug` uses for `user` (agents.run_settings_now); AppError 404 `not_found` when
    there is no such agent or the user may not use it (the same answer for both)."""
    try:
        return await db(agents.run_settings_now, user, slug)
    except AppError as exc:
        if exc.status == 404:
            raise _not_found(slug) from exc
        raise


def _facts_now(user: AbstractBaseUser | None, slug: str) -> AgentFacts | None:
    if user is not None:
        try:
            agents.resolve_now(user, agents.PREFIX + slug)
        except AppError:
            return None
    row = Agent.objects.filter(slug=slug).values("slug", "name", "description", "version", "starters").first()
    if row is None:
        return None
    starters = tuple(str(text) for text in row["starters"] or () if isinstance(text, str))
    return AgentFacts(slug=row["slug"], name=row["name"], description=row["description"], version=row["version"],
                      starters=starters)


async def agent_facts(user: AbstractBaseUser | None, slug: str) -> AgentFacts | None:
    """The card's facts of agent `slug` for `user` (None: an anonymous reader of a public card); None when there
    is no such agent or the user may not use it."""
    return await db(_facts_now, user, slug)


def public_facts_now(slugs: tuple[str, ...]) -> list[AgentFacts]:
    """The facts of the public agents that exist, in the order named (the deployment's card)."""
    found = [_facts_now(None, slug) for slug in dict.fromkeys(slugs)]
    return [facts for facts in found if facts is not None]
