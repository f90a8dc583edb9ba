"""Reads of chat sessions and messages, always scoped to their owner."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, QuerySet

from agents_app.models import Agent
from agentsite.core.errors import AppError
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def session_list_for(*, owner: AbstractBaseUser) -> QuerySet[ChatSession]:
    """The owner's sessions, each with its message_count and its agent (for `agent_slug`)."""
    return ChatSession.objects.filter(owner=owner).select_related("agent").annotate(message_count=Count("messages"))


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
    """The owner's session (its id, name, model and agent: `agent_slug` answers without a query) and its
    messages, oldest first, with what a turn's history
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
    name, model, agent_id, agent_slug = rows[0][:4]
    session = ChatSession(id=session_id, owner_id=owner.pk, name=name, model=model, agent_id=agent_id)
    session._state.adding, session._state.db = False, DEFAULT_DB_ALIAS
    if agent_id is not None:
        session.agent = Agent(pk=agent_id, slug=agent_slug)  # the slug is all a turn reads of it
    attachments, tool_calls = (ChatMessage._meta.get_field(name) for name in ("attachments", "tool_calls"))
    return session, [
        HistoryMessage(role, content, attachments.from_db_value(stored_attachments, None, connection),
                       tool_calls.from_db_value(stored_calls, None, connection), status)
        for _, _, _, _, role, content, stored_attachments, stored_calls, status in rows if role is not None]


@functools.lru_cache(maxsize=8)
def _turn_history_sql(vendor: str) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    session, message = quote(ChatSession._meta.db_table), quote(ChatMessage._meta.db_table)
    agent = quote(Agent._meta.db_table)
    columns = ", ".join(f"m.{quote(name)}" for name in ("role", "content", "attachments", "tool_calls", "status"))
    return (f"SELECT s.{quote('name')}, s.{quote('model')}, s.{quote('agent_id')}, a.{quote('slug')}, {columns} "
            f"FROM {session} s LEFT JOIN {agent} a ON a.{quote('id')} = s.{quote('agent_id')} "
            f"LEFT JOIN {message} m ON m.{quote('session_id')} = s.{quote('id')} "
            f"WHERE s.{quote('id')} = %s AND s.{quote('owner_id')} = %s ORDER BY m.{quote('seq')}")


def message_list_for(*, session: ChatSession) -> QuerySet[ChatMessage]:
    return ChatMessage.objects.filter(session=session).order_by("seq")
