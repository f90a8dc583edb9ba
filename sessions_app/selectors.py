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


CURRENT = "current"  # turn_history's `parent` when the request named none: the session's current message


@dataclass(frozen=True)
class TurnHistory:
    """What a turn continues: its session, the path from the first message down to `parent` (the message the
    turn's first new message follows; None: a new first question), oldest first."""

    session: ChatSession
    path: list[HistoryMessage]
    parent: uuid.UUID | None


def turn_history(*, owner: AbstractBaseUser, session_id: uuid.UUID, parent: uuid.UUID | str | None = CURRENT,
                 regenerate: uuid.UUID | None = None) -> TurnHistory:
    """The owner's session (its id, name, model and agent: `agent_slug` answers without a query) and the
    selected path a turn continues, read in one statement (every message of the session; the path is walked
    here, so a sibling branch never enters the history).

    `parent`: CURRENT (the session's current message), None (a new first question: an edit of the first one)
    or the id of an assistant message of the session, which the new question follows (an edit of a later one).
    `regenerate`: the id of an assistant message, whose question the turn answers again (its sibling).
    Raises AppError 404 for another user's or a missing session, as session_get_for, 404 for a `regenerate`
    that is not an assistant message of the session, 400 `invalid` naming `parent` for a parent that is not
    one of its assistant messages.

    Plain SQL, built once: ORM queries cost a chat turn more than the database takes to answer them, and
    they stand between the user's message and the model's first token."""
    connection = connections[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute(_turn_history_sql(connection.vendor),
                       [ChatSession._meta.pk.get_db_prep_value(session_id, connection), owner.pk])
        rows = cursor.fetchall()
    if not rows:
        raise AppError("not_found", "No such session.", 404)
    name, model, agent_id, agent_slug, current = rows[0][:5]
    session = ChatSession(id=session_id, owner_id=owner.pk, name=name, model=model, agent_id=agent_id)
    session._state.adding, session._state.db = False, DEFAULT_DB_ALIAS
    if agent_id is not None:
        session.agent = Agent(pk=agent_id, slug=agent_slug)  # the slug is all a turn reads of it
    pk, attachments, tool_calls = (ChatMessage._meta.get_field(field)
                                   for field in ("id", "attachments", "tool_calls"))
    nodes: dict[uuid.UUID, tuple[uuid.UUID | None, HistoryMessage]] = {}
    for *_, message_id, parent_id, role, content, stored_attachments, stored_calls, status in rows:
        if message_id is None:
            continue
        nodes[pk.to_python(message_id)] = (pk.to_python(parent_id) if parent_id is not None else None, HistoryMessage(
            role, content, attachments.from_db_value(stored_attachments, None, connection),
            tool_calls.from_db_value(stored_calls, None, connection), status))
    if regenerate is not None:
        found = nodes.get(regenerate)
        if found is None or found[1].role != "assistant" or found[0] is None:
            raise AppError("not_found", "No such reply in this session: regenerate names an assistant message "
                           "of the session (GET /api/sessions/:id/messages).", 404)
        start = found[0]
    elif parent == CURRENT:
        start = pk.to_python(current) if current is not None else None
    else:
        start = _parent_checked(nodes, parent)
    return TurnHistory(session=session, path=_path_to(nodes, start), parent=start)


def _parent_checked(nodes: dict[uuid.UUID, tuple[uuid.UUID | None, HistoryMessage]],
                    parent: uuid.UUID | str | None) -> uuid.UUID | None:
    if parent is None:
        return None
    found = nodes.get(parent)  # type: ignore[arg-type]
    if found is None or found[1].role != "assistant":
        raise AppError("invalid", "parent must be the id of an assistant message of this session (the reply the "
                       "new question follows), or null for a new first question.", 400,
                       {"parent": ["Not an assistant message of this session."]})
    return parent  # type: ignore[return-value]


def _path_to(nodes: dict[uuid.UUID, tuple[uuid.UUID | None, HistoryMessage]],
             last: uuid.UUID | None) -> list[HistoryMessage]:
    """The messages from the root down to `last`, oldest first (a parent is always an earlier message, so the
    walk ends; the bound only guards against a corrupted row)."""
    path: list[HistoryMessage] = []
    while last is not None and last in nodes and len(path) <= len(nodes):
        last, message = nodes[last]
        path.append(message)
    path.reverse()
    return path


@functools.lru_cache(maxsize=8)
def _turn_history_sql(vendor: str) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    session, message = quote(ChatSession._meta.db_table), quote(ChatMessage._meta.db_table)
    agent = quote(Agent._meta.db_table)
    columns = ", ".join(f"m.{quote(name)}" for name in ("id", "parent_id", "role", "content", "attachments",
                                                         "tool_calls", "status"))
    return (f"SELECT s.{quote('name')}, s.{quote('model')}, s.{quote('agent_id')}, a.{quote('slug')}, "
            f"s.{quote('current_id')}, {columns} "
            f"FROM {session} s LEFT JOIN {agent} a ON a.{quote('id')} = s.{quote('agent_id')} "
            f"LEFT JOIN {message} m ON m.{quote('session_id')} = s.{quote('id')} "
            f"WHERE s.{quote('id')} = %s AND s.{quote('owner_id')} = %s ORDER BY m.{quote('seq')}")


def message_list_for(*, session: ChatSession) -> QuerySet[ChatMessage]:
    """Every message of the session's tree, oldest first, each with `child_ids` (its children's ids, oldest
    first) once listed through messages_with_children."""
    return ChatMessage.objects.filter(session=session).order_by("seq")


def messages_with_children(messages: QuerySet[ChatMessage] | list[ChatMessage]) -> list[ChatMessage]:
    """The messages (a whole tree, oldest first), each given `child_ids` from the others' parents."""
    listed = list(messages)
    children: dict[uuid.UUID, list[str]] = {}
    for message in listed:
        if message.parent_id is not None:
            children.setdefault(message.parent_id, []).append(str(message.pk))
    for message in listed:
        message.child_ids = children.get(message.pk, [])
    return listed


def message_get_for(*, session: ChatSession, message_id: uuid.UUID) -> ChatMessage:
    """A message of the session, with its `child_ids`; AppError 404 otherwise."""
    message = ChatMessage.objects.filter(session=session, pk=message_id).first()
    if message is None:
        raise AppError("not_found", "No such message in this session.", 404)
    message.child_ids = [str(child) for child in ChatMessage.objects.filter(parent=message).order_by("seq")
                         .values_list("pk", flat=True)]
    return message


def steps_of(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A turn's tool calls as the steps a message shows: `{type: "tool_call", id, name, arguments, result,
    is_error, duration_ms}` (result None: the call never finished)."""
    steps = []
    for call in tool_calls or []:
        result = call.get("result") or {}
        steps.append({"type": "tool_call", "id": call.get("id", ""), "name": call.get("name", ""),
                      "arguments": call.get("arguments") or {}, "result": result.get("content"),
                      "is_error": bool(result.get("is_error")), "duration_ms": result.get("duration_ms")})
    return steps
