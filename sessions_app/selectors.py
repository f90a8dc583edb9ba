"""Reads of chat sessions and messages, always scoped to their owner."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections
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


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """A stored message as a turn's history reads it (sessions_app.history takes these and ChatMessage alike)."""

    role: str
    content: str
    attachments: list[Any]
    tool_calls: list[Any]
    status: str


def turn_history(*, owner: AbstractBaseUser, session_id: uuid.UUID) -> tuple[ChatSession, list[HistoryMessage]]:
    """The owner's session (its id, name and model) and its messages, oldest first, with what a turn's history
    is made of (role, content, attachments, tool_calls, status: sessions_app.history), read in one statement.
    Raises AppError 404 for another user's or a missing session, as session_get_for.

    Plain SQL, built once: two ORM queries cost a chat turn more than the database takes to answer them, and
    they stand between the user's message and the model's first token."""
    connection = connections[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute(_turn_history_sql(connection.vendor),
                       [ChatSession._meta.pk.get_db_prep_value(session_id, connection), owner.pk])
        rows = cursor.fetchall()
    if not rows:
        raise AppError("not_found", "No such session.", 404)
    session = ChatSession(id=session_id, owner_id=owner.pk, name=rows[0][0], model=rows[0][1])
    session._state.adding, session._state.db = False, DEFAULT_DB_ALIAS
    attachments, tool_calls = (ChatMessage._meta.get_field(name) for name in ("attachments", "tool_calls"))
    return session, [
        HistoryMessage(role, content, attachments.from_db_value(stored_attachments, None, connection),
                       tool_calls.from_db_value(stored_calls, None, connection), status)
        for _, _, role, content, stored_attachments, stored_calls, status in rows if role is not None]


@functools.lru_cache(maxsize=8)
def _turn_history_sql(vendor: str) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    session, message = quote(ChatSession._meta.db_table), quote(ChatMessage._meta.db_table)
    columns = ", ".join(f"m.{quote(name)}" for name in ("role", "content", "attachments", "tool_calls", "status"))
    return (f"SELECT s.{quote('name')}, s.{quote('model')}, {columns} FROM {session} s LEFT JOIN {message} m "
            f"ON m.{quote('session_id')} = s.{quote('id')} WHERE s.{quote('id')} = %s AND s.{quote('owner_id')} = %s "
            f"ORDER BY m.{quote('seq')}")


def message_list_for(*, session: ChatSession) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(session=session).order_by("seq")
