"""Writes of chat sessions and messages."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Max
from django.utils import timezone

from agentsite.agent.modelchoice import model_checked
from agentsite.core.errors import AppError
from agentsite.core.processes import current_process_id, owned_by
from sessions_app.agents import agent_chosen
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def session_create(*, owner: AbstractBaseUser, name: str | None = None, model: str = "",
                   agent: str | None = None) -> ChatSession:
    """A session of `owner` talking to `agent` (a slug; None: the agent `default`, stored as none). Raises
    AppError 400 `invalid` naming `model` when it is not in the model catalogue, 404 `not_found` naming `agent`
    when the owner may not use that agent (or there is none)."""
    chosen = agent_chosen(owner, agent) if agent is not None else None
    return ChatSession.objects.create(owner=owner, name=(name or "New chat").strip() or "New chat",
                                      model=model_checked(model), agent=chosen)


@transaction.atomic
def session_update(*, session: ChatSession, changes: dict[str, Any]) -> ChatSession:
    """Apply `name`, `model` ("" = the agent's default), `agent` (a slug), `current` (session_select), `pinned`
    and/or `archived`. Raises AppError 400 `invalid` naming `model` or `current`, 404 `not_found` naming `agent`
    (as session_create); nothing is changed then. Pinning, archiving and choosing a branch leave `updated_at`
    (the list's order after the pinned ones) as it was: they change how the chat is kept, not the chat."""
    fields: list[str] = []
    if "current" in changes:
        session_select(session=session, message_id=changes["current"])
    for flag in ("pinned", "archived"):
        if flag in changes:
            setattr(session, flag, changes[flag])
            fields.append(flag)
    if "agent" in changes:
        session.agent = agent_chosen(session.owner, changes["agent"])
        fields.append("agent")
    if "model" in changes:
        session.model = model_checked(changes["model"])
        fields.append("model")
    if "name" in changes:
        session.name = changes["name"]
        fields.append("name")
    if {"agent", "model", "name"} & set(fields):
        fields.append("updated_at")
    if fields:
        session.save(update_fields=fields)
    return session


def session_rename(*, session: ChatSession, name: str) -> ChatSession:
    session.name = name
    session.save(update_fields=["name", "updated_at"])
    return session


def session_delete(*, session: ChatSession) -> None:
    session.delete()  # its messages go with it (CASCADE)


@transaction.atomic
def message_append(*, session: ChatSession, role: str, content: str, message_id: uuid.UUID | None = None,
                   **fields: Any) -> ChatMessage:
    """Append a message after the session's current one (or `parent_id`), make it current and touch the
    session's updated_at."""
    # Lock the session row so two concurrent appends cannot take the same seq.
    locked = ChatSession.objects.select_for_update().get(pk=session.pk)
    last = locked.messages.aggregate(last=Max("seq"))["last"]
    fields.setdefault("parent_id", locked.current_id)
    message = ChatMessage.objects.create(id=message_id or uuid.uuid4(), session=locked, role=role, content=content,
                                         seq=(last or 0) + 1, **fields)
    ChatSession.objects.filter(pk=locked.pk).update(updated_at=timezone.now(), current=message)
    return message


def message_start_reply(*, session: ChatSession, message_id: uuid.UUID) -> ChatMessage:
    """The assistant reply about to stream, stored now as `streaming` by this process: if the process dies,
    what was checkpointed stays, as `interrupted` (sessions_app.apps registers the sweeper)."""
    return message_append(session=session, message_id=message_id, role="assistant", content="",
                          status="streaming", process=current_process_id())


# A chat turn's own writes (its opening, checkpoints, final store) are plain SQL, built once per database vendor
# and set of columns, with each value prepared by its model field (as the ORM would): they run on every turn,
# beside the model's first token or before the `done` event, and building ORM queries costs several times what
# the database takes to answer them.

def turn_messages_store(*, session: ChatSession, user_message: ChatMessage | None, reply_id: uuid.UUID,
                        parent: uuid.UUID | None, **reply_fields: Any) -> None:
    """A turn's opening write, in one transaction: the user message (unsaved, as the turn built it; None for a
    regenerated reply) following `parent` and, right after it, the assistant reply as `streaming` by this
    process (message_start_reply), which becomes the session's `current`, the session's updated_at touched
    (message_append). `reply_fields`: the reply's other columns (its agent). Raises ChatSession.DoesNotExist when
    the session was deleted meanwhile (then nothing is stored)."""
    connection = connections[DEFAULT_DB_ALIAS]
    statements = _opening_sql(connection.vendor, connection.features.has_select_for_update)
    session_id = ChatSession._meta.pk.get_db_prep_value(session.pk, connection)
    reply = ChatMessage(id=reply_id, session_id=session.pk, role="assistant", content="", status="streaming",
                        process=current_process_id(), **reply_fields)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statements.lock, [session_id])  # two turns of one session never take the same seq
        if cursor.fetchone() is None:
            raise ChatSession.DoesNotExist("The session was deleted.")
        cursor.execute(statements.last_seq, [session_id])
        last = cursor.fetchone()[0] or 0
        if user_message is None:
            reply.seq, reply.parent_id = last + 1, parent
            cursor.execute(statements.insert_one, _insert_values(reply, connection))
        else:
            user_message.session_id, user_message.seq, user_message.parent_id = session.pk, last + 1, parent
            reply.seq, reply.parent_id = last + 2, user_message.pk
            cursor.execute(statements.insert, [*_insert_values(user_message, connection),
                                               *_insert_values(reply, connection)])
        cursor.execute(statements.touch, [ChatSession._meta.get_field("updated_at").get_db_prep_save(
            timezone.now(), connection), ChatSession._meta.pk.get_db_prep_value(reply_id, connection), session_id])


@dataclass(frozen=True)
class _OpeningSql:
    lock: str
    last_seq: str
    insert: str
    insert_one: str
    touch: str


@functools.lru_cache(maxsize=8)
def _opening_sql(vendor: str, for_update: bool) -> _OpeningSql:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    session, message = quote(ChatSession._meta.db_table), quote(ChatMessage._meta.db_table)
    columns = [field.column for field in ChatMessage._meta.concrete_fields]
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    insert = f"INSERT INTO {message} ({', '.join(quote(column) for column in columns)}) VALUES {row}"
    return _OpeningSql(
        lock=f"SELECT 1 FROM {session} WHERE {quote('id')} = %s" + (" FOR UPDATE" if for_update else ""),
        last_seq=f"SELECT MAX({quote('seq')}) FROM {message} WHERE {quote('session_id')} = %s",
        insert=f"{insert}, {row}", insert_one=insert,
        touch=f"UPDATE {session} SET {quote('updated_at')} = %s, {quote('current_id')} = %s WHERE {quote('id')} = %s")


def _insert_values(message: ChatMessage, connection: Any) -> list[Any]:
    return [field.get_db_prep_save(field.pre_save(message, True), connection)
            for field in ChatMessage._meta.concrete_fields]


def _reply_update(message_id: uuid.UUID, fields: dict[str, Any], *, final: bool = False) -> int:
    """UPDATE the reply with these fields if this process may still write it; the number of rows (0 or 1).

    A reply this process may still write: streaming, or marked `interrupted` by a peer's sweep that took this
    process for dead (its heartbeat stalled) while it was in fact still generating. The sweep keeps `process`
    for this; a reply stored as final, interrupted included, has it cleared. The final store (`final`) may also
    write a reply that a stop request marked `stopped` (message_stop keeps `process` too): a checkpoint may not,
    so that a stopped reply never turns back to `streaming`, and a final `interrupted` (the client hung up while
    the stop was on its way) keeps a stopped reply's status: the user asked it to stop."""
    connection = connections[DEFAULT_DB_ALIAS]
    names = tuple(sorted(fields))
    values = [ChatMessage._meta.get_field(name).get_db_prep_save(fields[name], connection) for name in names]
    process = current_process_id()
    keep_stopped = final and fields.get("status") == "interrupted"
    with connection.cursor() as cursor:
        cursor.execute(_reply_update_sql(connection.vendor, names, final, keep_stopped), [
            *values, ChatMessage._meta.pk.get_db_prep_value(message_id, connection), process,
            *([process] if final else [])])
        return cursor.rowcount


@functools.lru_cache(maxsize=64)
def _reply_update_sql(vendor: str, names: tuple[str, ...], final: bool, keep_stopped: bool = False) -> str:
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    status, reason, process = quote("status"), quote("finish_reason"), quote("process")

    def assigned(name: str) -> str:
        column = quote(ChatMessage._meta.get_field(name).column)
        if keep_stopped and name in ("status", "finish_reason"):
            return f"{column} = CASE WHEN {status} = 'stopped' THEN {column} ELSE %s END"
        return f"{column} = %s"

    columns = ", ".join(assigned(name) for name in names)
    stopped = f" OR ({status} = 'stopped' AND {process} = %s)" if final else ""
    return (f"UPDATE {quote(ChatMessage._meta.db_table)} SET {columns} WHERE {quote('id')} = %s AND "
            f"({status} = 'streaming' OR ({status} = 'interrupted' AND {reason} = 'interrupted' AND {process} = %s)"
            f"{stopped})")


def message_checkpoint_reply(*, message_id: uuid.UUID, **fields: Any) -> bool:
    """Save what a streaming reply has so far (content, tool_calls, sources); False once it is final."""
    return bool(_reply_update(message_id, {**fields, "status": "streaming"}))


def message_store_reply(*, session: ChatSession, message_id: uuid.UUID, **fields: Any) -> ChatMessage | None:
    """Store an assistant reply once: the streaming placeholder becomes final; a second store of the same id
    keeps the first; with no placeholder the reply is appended. Raises ChatSession.DoesNotExist when the
    session was deleted meanwhile."""
    if _reply_update(message_id, {**fields, "process": ""}, final=True):
        return ChatMessage.objects.filter(pk=message_id).first()
    existing = ChatMessage.objects.filter(pk=message_id).first()
    if existing is not None:
        return existing
    return message_append(session=session, message_id=message_id, **fields)


def message_finish_reply(*, session: ChatSession, message_id: uuid.UUID, **fields: Any) -> None:
    """message_store_reply without reading the stored reply back (a turn's final store: one UPDATE)."""
    if not _reply_update(message_id, {**fields, "process": ""}, final=True):
        message_store_reply(session=session, message_id=message_id, **fields)


def replies_mark_interrupted(dead: list[str], include_unowned: bool = False) -> int:
    """Replies that these dead processes were streaming become `interrupted`, keeping their last checkpoint
    (the agentsite.core.processes sweeper; include_unowned: streaming replies that name no process too)."""
    owned = owned_by(dead, include_unowned)
    # A reply stopped while its process died keeps `stopped` and its last checkpoint; nothing will write it.
    ChatMessage.objects.filter(owned, status="stopped").exclude(process="").update(process="")
    return ChatMessage.objects.filter(owned, status="streaming").update(status="interrupted",
                                                                        finish_reason="interrupted")


def message_stop(*, message: ChatMessage) -> bool:
    """Mark a streaming reply `stopped` (keeping its last checkpoint and `process`, whose turn then stores what
    it generated as `stopped`: sessions_app.stops); False when it was not streaming (it had ended already)."""
    return bool(ChatMessage.objects.filter(pk=message.pk, status="streaming").update(
        status="stopped", finish_reason="stopped"))


def session_select(*, session: ChatSession, message_id: uuid.UUID) -> ChatSession:
    """Make the branch through `message_id` the selected path: `current` becomes the newest message below it
    (the latest turn of that branch: a leaf, since a message is always older than what follows it; the message
    itself when nothing follows it). Raises AppError 400 `invalid` naming `current` for an id that is not a
    message of this session."""
    children: dict[uuid.UUID | None, list[uuid.UUID]] = {}
    seq: dict[uuid.UUID, int] = {}
    for pk, parent, number in ChatMessage.objects.filter(session=session).values_list("pk", "parent_id", "seq"):
        children.setdefault(parent, []).append(pk)
        seq[pk] = number
    if message_id not in seq:
        raise AppError("invalid", "current must be the id of a message of this session.", 400,
                       {"current": ["Not a message of this session."]})
    newest, below = message_id, [message_id]
    while below:
        node = below.pop()
        newest = node if seq[node] > seq[newest] else newest
        # Children are newer than their parent: a corrupted row that loops back is never followed.
        below.extend(child for child in children.get(node, []) if seq[child] > seq[node])
    ChatSession.objects.filter(pk=session.pk).update(current_id=newest)
    session.current_id = newest
    return session
