"""Writes of chat sessions and messages."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from sessions_app.models import ChatMessage, ChatSession


def session_create(*, owner: Any, name: str | None = None) -> ChatSession:
    return ChatSession.objects.create(owner=owner, name=(name or "New chat").strip() or "New chat")


def session_rename(*, session: ChatSession, name: str) -> ChatSession:
    session.name = name
    session.save(update_fields=["name", "updated_at"])
    return session


def session_delete(*, session: ChatSession) -> None:
    session.delete()  # its messages go with it (CASCADE)


@transaction.atomic
def message_append(*, session: ChatSession, role: str, content: str, message_id: uuid.UUID | None = None,
                   **fields: Any) -> ChatMessage:
    """Append a message at the end of the session and touch the session's updated_at."""
    # Lock the session row so two concurrent appends cannot take the same seq.
    locked = ChatSession.objects.select_for_update().get(pk=session.pk)
    last = locked.messages.aggregate(last=Max("seq"))["last"]
    message = ChatMessage.objects.create(id=message_id or uuid.uuid4(), session=locked, role=role, content=content,
                                         seq=(last or 0) + 1, **fields)
    ChatSession.objects.filter(pk=locked.pk).update(updated_at=timezone.now())
    return message


def message_store_reply(*, session: ChatSession, message_id: uuid.UUID, **fields: Any) -> ChatMessage | None:
    """Store an assistant reply once; a second store of the same id keeps the first (None when gone)."""
    existing = ChatMessage.objects.filter(pk=message_id).first()
    if existing is not None:
        return existing
    return message_append(session=session, message_id=message_id, **fields)
