"""Reads of chat sessions and messages, always scoped to their owner."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.db.models import Count, QuerySet

from agentsite.core.errors import AppError
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def session_list_for(*, owner: AbstractBaseUser) -> QuerySet[ChatSession]:
    return ChatSession.objects.filter(owner=owner).annotate(message_count=Count("messages"))


def session_get_for(*, owner: AbstractBaseUser, session_id: uuid.UUID) -> ChatSession:
    """The owner's session; raises AppError 404 for another user's or a missing one (ids do not leak)."""
    session = session_list_for(owner=owner).filter(pk=session_id).first()
    if session is None:
        raise AppError("not_found", "No such session.", 404)
    return session


def message_list_for(*, session: ChatSession) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(session=session).order_by("seq")
