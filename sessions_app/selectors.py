"""Reads of chat sessions and messages, always scoped to their owner."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from agentsite.errors import AppError
from sessions_app.models import ChatMessage, ChatSession


def session_list_for(*, owner: Any) -> QuerySet[ChatSession]:
    return ChatSession.objects.filter(owner=owner).annotate(message_count=Count("messages"))


def session_get_for(*, owner: Any, session_id: Any) -> ChatSession:
    """The owner's session; raises AppError 404 for another user's or a missing one (ids do not leak)."""
    session = session_list_for(owner=owner).filter(pk=session_id).first()
    if session is None:
        raise AppError("not_found", "No such session.", 404)
    return session


def message_list_for(*, session: ChatSession) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(session=session).order_by("seq")
