"""Writes of chat sessions and messages."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from agentsite.agent.modelchoice import model_checked
from agentsite.core.processes import current_process_id, owned_by
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


def session_create(*, owner: AbstractBaseUser, name: str | None = None, model: str = "") -> ChatSession:
    """Raises AppError 400 `invalid` naming `model` when it is not in the model catalogue."""
    return ChatSession.objects.create(owner=owner, name=(name or "New chat").strip() or "New chat",
                                      model=model_checked(model))


def session_update(*, session: ChatSession, changes: dict[str, Any]) -> ChatSession:
    """Apply `name` and/or `model` ("" = the agent's default). Raises AppError 400 `invalid` naming `model`."""
    fields = ["updated_at"]
    if "model" in changes:
        session.model = model_checked(changes["model"])
        fields.append("model")
    if "name" in changes:
        session.name = changes["name"]
        fields.append("name")
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
    """Append a message at the end of the session and touch the session's updated_at."""
    # Lock the session row so two concurrent appends cannot take the same seq.
    locked = ChatSession.objects.select_for_update().get(pk=session.pk)
    last = locked.messages.aggregate(last=Max("seq"))["last"]
    message = ChatMessage.objects.create(id=message_id or uuid.uuid4(), session=locked, role=role, content=content,
                                         seq=(last or 0) + 1, **fields)
    ChatSession.objects.filter(pk=locked.pk).update(updated_at=timezone.now())
    return message


def message_start_reply(*, session: ChatSession, message_id: uuid.UUID) -> ChatMessage:
    """The assistant reply about to stream, stored now as `streaming` by this process: if the process dies,
    what was checkpointed stays, as `interrupted` (sessions_app.apps registers the sweeper)."""
    return message_append(session=session, message_id=message_id, role="assistant", content="",
                          status="streaming", process=current_process_id())


@transaction.atomic
def turn_messages_store(*, session: ChatSession, user_message: ChatMessage, reply_id: uuid.UUID) -> None:
    """A turn's opening write, in one transaction: the user message (unsaved, as the turn built it) and, right
    after it, the assistant reply as `streaming` by this process (message_start_reply). Raises
    ChatSession.DoesNotExist when the session was deleted meanwhile (then nothing is stored)."""
    locked = ChatSession.objects.select_for_update().get(pk=session.pk)
    last = locked.messages.aggregate(last=Max("seq"))["last"] or 0
    user_message.session, user_message.seq = locked, last + 1
    reply = ChatMessage(id=reply_id, session=locked, role="assistant", content="", seq=last + 2, status="streaming",
                        process=current_process_id())
    ChatMessage.objects.bulk_create([user_message, reply])
    ChatSession.objects.filter(pk=locked.pk).update(updated_at=timezone.now())


def _still_generating() -> Q:
    """A reply this process may still write: streaming, or marked `interrupted` by a peer's sweep that took this
    process for dead (its heartbeat stalled) while it was in fact still generating. The sweep keeps `process`
    for this; a reply stored as final, interrupted included, has it cleared."""
    return Q(status="streaming") | Q(status="interrupted", finish_reason="interrupted", process=current_process_id())


def message_checkpoint_reply(*, message_id: uuid.UUID, **fields: Any) -> bool:
    """Save what a streaming reply has so far (content, tool_calls, sources); False once it is final."""
    return bool(ChatMessage.objects.filter(_still_generating(), pk=message_id).update(status="streaming", **fields))


def message_store_reply(*, session: ChatSession, message_id: uuid.UUID, **fields: Any) -> ChatMessage | None:
    """Store an assistant reply once: the streaming placeholder becomes final; a second store of the same id
    keeps the first; with no placeholder the reply is appended. Raises ChatSession.DoesNotExist when the
    session was deleted meanwhile."""
    if ChatMessage.objects.filter(_still_generating(), pk=message_id).update(process="", **fields):
        return ChatMessage.objects.filter(pk=message_id).first()
    existing = ChatMessage.objects.filter(pk=message_id).first()
    if existing is not None:
        return existing
    return message_append(session=session, message_id=message_id, **fields)


def message_finish_reply(*, session: ChatSession, message_id: uuid.UUID, **fields: Any) -> None:
    """message_store_reply without reading the stored reply back (a turn's final store: one UPDATE)."""
    if not ChatMessage.objects.filter(_still_generating(), pk=message_id).update(process="", **fields):
        message_store_reply(session=session, message_id=message_id, **fields)


def replies_mark_interrupted(dead: list[str], include_unowned: bool = False) -> int:
    """Replies that these dead processes were streaming become `interrupted`, keeping their last checkpoint
    (the agentsite.core.processes sweeper; include_unowned: streaming replies that name no process too)."""
    owned = owned_by(dead, include_unowned)
    return ChatMessage.objects.filter(owned, status="streaming").update(status="interrupted",
                                                                        finish_reason="interrupted")
