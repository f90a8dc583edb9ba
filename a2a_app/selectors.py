"""Reads of remote A2A agents: those a caller may use (the organisation's access rule, asked afresh on every
read), one by id, and a remote as a call needs it (headers opened)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from a2a_app.models import A2ARemote
from agentsite.agent.tooltypes import ToolContext
from agentsite.core.errors import AppError
from agentsite.core.secretbox import unseal
from organisation.policy import visible_q

HEADER_PURPOSE = "a2a_remote.header"


@dataclass(frozen=True)
class RemoteSpec:
    """What a call needs of a stored remote: its name, its card (as stored) and its headers, opened."""

    name: str
    card: dict[str, Any]
    headers: dict[str, str] = field(repr=False)


def card_summary(card: dict[str, Any]) -> dict[str, Any]:
    """{description, version, streaming, skills: [{id, name, description, tags}]} of a stored card (the SDK's
    AgentCard as JSON, checked when stored: read here without the SDK, which start-up does not import)."""
    skills = [{"id": str(skill.get("id", "")), "name": str(skill.get("name", "")),
               "description": str(skill.get("description", "")), "tags": [str(tag) for tag in skill.get("tags", [])]}
              for skill in card.get("skills", [])]
    return {"description": str(card.get("description", "")), "version": str(card.get("version", "")),
            "streaming": bool(card.get("capabilities", {}).get("streaming", False)), "skills": skills}


def _principal(caller: ToolContext):
    """The caller's user for the policy, an admin only if the caller acts as one (an API key without the admin
    scope does not); None for no user or a user who no longer exists."""
    if caller.user_id is None:
        return None
    user = get_user_model().objects.filter(pk=caller.user_id, is_active=True).first()
    if user is not None:
        user.is_staff = bool(caller.is_admin)  # this copy only: what the credential carries, not the account
    return user


def remotes_usable_by(caller: ToolContext) -> QuerySet[A2ARemote]:
    """The remotes whose access rule lets this caller in: every one for an admin, those open to everyone or
    granted to the user or one of their groups for a user, none for a caller with no user."""
    user = _principal(caller)
    if user is None:
        return A2ARemote.objects.none()
    return A2ARemote.objects.filter(visible_q(user, A2ARemote, every_object_for_admins=True))


def remote_get_for(*, caller: ToolContext, remote_id: int) -> A2ARemote:
    """The remote of this id if the caller may use it. Raises AppError 404 `not_found` (also for one they may
    not use: it is not told apart from none)."""
    remote = remotes_usable_by(caller).filter(pk=remote_id).first()
    if remote is None:
        raise AppError("not_found", "No remote A2A agent with that id.", 404)
    return remote


def remote_spec(remote: A2ARemote) -> RemoteSpec:
    """The remote as a call needs it, its header values opened."""
    headers = {str(name): unseal(str(value), purpose=HEADER_PURPOSE) for name, value in (remote.headers or {}).items()}
    return RemoteSpec(name=remote.name, card=dict(remote.card or {}), headers=headers)
