"""Chats taken out and brought in (docs/api.md, Export and import).

Export: the selected path as Markdown (to read), or the whole tree as a versioned JSON document (to import
again). Import: that document, or ChatGPT's `conversations.json` (sessions_app.chatgpt), each conversation a new
session of the importer. The invariant: an import stores every session of the document or none (one
transaction, after the whole document has been read); imported messages get fresh ids and `seq` in tree order.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from agentsite.agent.modelchoice import model_checked
from agentsite.core.errors import AppError
from sessions_app import selectors
from sessions_app.agents import agent_chosen
from sessions_app.chatgpt import chatgpt_read
from sessions_app.importdoc import (
    NAME_MAX,
    UNTITLED,
    ImportedMessage,
    ImportedSession,
    content_at,
    count_check,
    invalid_at,
    iso_at,
    json_at,
    list_at,
    object_at,
    source_at,
    text_at,
    texts_checked,
    tool_call_at,
)
from sessions_app.models import ChatMessage, ChatSession

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

EXPORT_FORMAT = "agentsite.chat"
EXPORT_VERSION = 1
STATUSES = ("complete", "stopped", "interrupted", "error", "streaming")
ROLES = ("user", "assistant")
INSERT_BATCH = 500


# --- export ------------------------------------------------------------------------------------------------

def _time(value: datetime.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def session_export_document(*, session: ChatSession) -> dict[str, Any]:
    """The whole tree of the session as the `agentsite.chat` document, version 1 (what sessions_import reads)."""
    messages = selectors.message_list_for(session=session)
    return {
        # No export time: two exports of an unchanged session are the same bytes.
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION,
        "session": {"id": str(session.pk), "name": session.name, "model": session.model, "agent": session.agent_slug,
                    "pinned": session.pinned, "archived": session.archived,
                    "created_at": _time(session.created_at), "updated_at": _time(session.updated_at)},
        "messages": [{
            "id": str(message.pk), "parent": str(message.parent_id) if message.parent_id else None,
            "role": message.role, "content": message.content, "attachments": message.attachments,
            "tool_calls": message.tool_calls, "sources": message.sources, "status": message.status,
            "finish_reason": message.finish_reason, "model": message.model, "agent": message.agent,
            "usage": message.usage, "ttft_ms": message.ttft_ms, "created_at": _time(message.created_at),
        } for message in messages],
        "current": str(session.current_id) if session.current_id else None,
    }


def selected_path(session: ChatSession) -> list[ChatMessage]:
    """The session's `current` and its ancestors, oldest first."""
    by_id = {message.pk: message for message in selectors.message_list_for(session=session)}
    path: list[ChatMessage] = []
    node = by_id.get(session.current_id) if session.current_id else None
    while node is not None and len(path) <= len(by_id):
        path.append(node)
        node = by_id.get(node.parent_id) if node.parent_id else None
    path.reverse()
    return path


def session_export_markdown(*, session: ChatSession) -> str:
    """The selected path as a Markdown document: the title, the dates, then each message under a heading naming
    its role (and, for a reply, the model and a status other than complete), its tool steps and sources in
    short lists."""
    path = selected_path(session)
    lines = [f"# {_one_line(session.name)}", "",
             f"_Created {_when(session.created_at)} · {len(path)} messages_", ""]
    for message in path:
        lines += ["---", "", _heading(message), "", message.content or "_(empty)_", ""]
        lines += _steps_markdown(message) + _sources_markdown(message)
        if message.attachments:
            lines += [f"_{len(message.attachments)} attachment(s)_", ""]
    return "\n".join(lines).rstrip() + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _when(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _heading(message: ChatMessage) -> str:
    if message.role != "assistant":
        return f"### {message.role.capitalize()} · {_when(message.created_at)}"
    about = [part for part in (message.model, message.agent if message.agent not in ("", "default") else "") if part]
    status = f" ({message.status})" if message.status != "complete" else ""
    named = f" — {', '.join(_one_line(part) for part in about)}" if about else ""
    return f"### Assistant{named} · {_when(message.created_at)}{status}"


def _steps_markdown(message: ChatMessage) -> list[str]:
    steps = selectors.steps_of(message.tool_calls)
    if not steps:
        return []
    lines = ["**Tool steps**", ""]
    for step in steps:
        result = _one_line(str(step["result"])) if step["result"] is not None else "(no result)"
        failed = " (error)" if step["is_error"] else ""
        lines.append(f"- `{step['name']}` `{_cut(json.dumps(step['arguments'], ensure_ascii=False), 200)}`"
                     f"{failed} → {_cut(result, 200)}")
    return [*lines, ""]


def _sources_markdown(message: ChatMessage) -> list[str]:
    if not message.sources:
        return []
    lines = ["**Sources**", ""]
    for number, source in enumerate(message.sources, 1):
        document = source.get("document") or {}
        collection = source.get("collection") or {}
        where = f" ({_one_line(str(collection.get('name')))})" if collection.get("name") else ""
        lines.append(f"{number}. {_one_line(str(document.get('filename', '?')))}{where}, passage "
                     f"{source.get('chunk_index', '?')}: {_cut(_one_line(str(source.get('text', ''))), 160)}")
    return [*lines, ""]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def export_filename(session: ChatSession, extension: str) -> str:
    """A safe file name for the download: `chat-<the name, ASCII letters and digits>-<date>.<extension>`."""
    slug = re.sub(r"[^a-z0-9]+", "-", session.name.lower()).strip("-")[:60].strip("-") or "untitled"
    return f"chat-{slug}-{session.created_at:%Y-%m-%d}.{extension}"


# --- import --------------------------------------------------------------------------------------------------

def sessions_import(*, owner: AbstractBaseUser, document: Any) -> list[ChatSession]:
    """New sessions of `owner` from an `agentsite.chat` document (an object) or a ChatGPT export (a list), all or
    none. Raises AppError 400 `invalid` or `message_too_long` naming where the document is wrong (nothing is
    stored then)."""
    texts_checked(document, "conversations" if isinstance(document, list) else "")
    if isinstance(document, list):
        sessions = chatgpt_read(document)
    elif isinstance(document, dict) and document.get("format") == EXPORT_FORMAT:
        sessions = [chat_document_read(document)]
    else:
        raise invalid_at("format", f"Send an {EXPORT_FORMAT!r} export (an object) or ChatGPT's conversations.json "
                         "(a list).")
    return sessions_store(owner=owner, sessions=sessions)


def chat_document_read(document: dict[str, Any]) -> ImportedSession:
    """An `agentsite.chat` export read (other fields are ignored); raises AppError 400 naming where it is wrong.
    Its messages must list a parent before its children (an export does)."""
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= EXPORT_VERSION:
        raise invalid_at("version", f"This server reads version {EXPORT_VERSION} of {EXPORT_FORMAT!r}.")
    header = object_at(document.get("session", {}), "session")
    entries = list_at(document.get("messages", []), "messages")
    count_check(1, len(entries))
    messages: list[ImportedMessage] = []
    keys: set[str] = set()
    for index, entry in enumerate(entries):
        message = _document_message(entry, f"messages.{index}")
        if message.key in keys:
            raise invalid_at(f"messages.{index}.id", "Another message has this id.")
        if message.parent_key is not None and message.parent_key not in keys:
            raise invalid_at(f"messages.{index}.parent", "Names no earlier message of this document.")
        keys.add(message.key)
        messages.append(message)
    current = text_at(document.get("current"), "current", optional=True)
    if current is not None and current not in keys:
        raise invalid_at("current", "Names no message of this document.")
    name = text_at(header.get("name", UNTITLED), "session.name", max_length=NAME_MAX) or ""
    agent = text_at(header.get("agent"), "session.agent", optional=True, max_length=64)
    return ImportedSession(
        name=name.strip() or UNTITLED, messages=messages, current_key=current,
        model=text_at(header.get("model", ""), "session.model", max_length=300) or "", agent=agent,
        pinned=_flag(header.get("pinned", False), "session.pinned"),
        archived=_flag(header.get("archived", False), "session.archived"),
        created_at=iso_at(header.get("created_at"), "session.created_at"),
        updated_at=iso_at(header.get("updated_at"), "session.updated_at"))


def _flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise invalid_at(path, "Expected true or false.")
    return value


def _document_message(value: Any, path: str) -> ImportedMessage:
    entry = object_at(value, path)
    role = text_at(entry.get("role"), f"{path}.role")
    if role not in ROLES:
        raise invalid_at(f"{path}.role", f"Expected one of {', '.join(ROLES)}.")
    status = text_at(entry.get("status", "complete"), f"{path}.status")
    if status not in STATUSES:
        raise invalid_at(f"{path}.status", f"Expected one of {', '.join(STATUSES)}.")
    ttft = entry.get("ttft_ms")
    if ttft is not None and (isinstance(ttft, bool) or not isinstance(ttft, int) or not 0 <= ttft < 2**31):
        raise invalid_at(f"{path}.ttft_ms", "Expected a whole number of milliseconds, or null.")
    list_at(entry.get("attachments", []), f"{path}.attachments")
    return ImportedMessage(
        key=text_at(entry.get("id"), f"{path}.id", max_length=100) or "",
        parent_key=text_at(entry.get("parent"), f"{path}.parent", optional=True),
        role=role, content=content_at(text_at(entry.get("content", ""), f"{path}.content") or "", f"{path}.content"),
        created_at=iso_at(entry.get("created_at"), f"{path}.created_at"),
        tool_calls=[tool_call_at(call, f"{path}.tool_calls.{index}")
                    for index, call in enumerate(list_at(entry.get("tool_calls", []), f"{path}.tool_calls"))],
        sources=[source_at(source, f"{path}.sources.{index}")
                 for index, source in enumerate(list_at(entry.get("sources", []), f"{path}.sources"))],
        usage=json_at(object_at(entry.get("usage", {}), f"{path}.usage"), f"{path}.usage"),
        # A reply that was streaming when it was exported has no process here to finish it.
        status="interrupted" if status == "streaming" else status,
        finish_reason=text_at(entry.get("finish_reason", ""), f"{path}.finish_reason", max_length=30) or "",
        model=text_at(entry.get("model", ""), f"{path}.model", max_length=300) or "",
        agent=text_at(entry.get("agent", ""), f"{path}.agent", max_length=80) or "", ttft_ms=ttft)


@transaction.atomic
def sessions_store(*, owner: AbstractBaseUser, sessions: list[ImportedSession]) -> list[ChatSession]:
    """Store read sessions for `owner`: fresh ids, `seq` in the order given (tree order), `current` as read or the
    newest leaf, the document's times kept. A model not in the catalogue, or an agent the owner may not use,
    is left out (the session uses the agent `default` and its model). Attachments are never imported."""
    stored = []
    for imported in sessions:
        session = ChatSession.objects.create(owner=owner, name=imported.name, model=_model_kept(imported.model),
                                             agent=_agent_kept(owner, imported.agent), pinned=imported.pinned,
                                             archived=imported.archived)
        ids = {message.key: uuid.uuid4() for message in imported.messages}
        rows = [ChatMessage(
            id=ids[message.key], session=session, seq=seq, role=message.role, content=message.content,
            parent_id=ids[message.parent_key] if message.parent_key is not None else None,
            tool_calls=message.tool_calls, sources=message.sources, usage=message.usage, status=message.status,
            finish_reason=message.finish_reason, model=message.model, agent=message.agent, ttft_ms=message.ttft_ms,
            created_at=message.created_at or timezone.now()) for seq, message in enumerate(imported.messages, 1)]
        _insert(rows)
        current = ids[imported.current_key] if imported.current_key is not None else _newest_leaf(rows)
        now = timezone.now()
        ChatSession.objects.filter(pk=session.pk).update(
            current_id=current, created_at=imported.created_at or now,
            updated_at=imported.updated_at or imported.created_at or now)
        stored.append(session.pk)
    listed = {session.pk: session for session in selectors.session_list_for(owner=owner).filter(pk__in=stored)}
    return [listed[pk] for pk in stored]


def _model_kept(model: str) -> str:
    try:
        return model_checked(model) if model else ""
    except AppError:
        return ""


def _agent_kept(owner: AbstractBaseUser, slug: str | None) -> Any:
    if not slug or slug == "default":
        return None
    try:
        return agent_chosen(owner, slug)
    except AppError:
        return None


def _newest_leaf(rows: list[ChatMessage]) -> uuid.UUID | None:
    parents = {row.parent_id for row in rows}
    leaves = [row for row in rows if row.pk not in parents]
    return max(leaves, key=lambda row: (row.created_at, row.seq)).pk if leaves else None


def _insert(rows: list[ChatMessage]) -> None:
    """INSERT the rows as they are: the ORM's bulk_create would replace each `created_at` (auto_now_add) with
    now, and an import keeps the document's times."""
    if not rows:
        return
    connection = connections[DEFAULT_DB_ALIAS]
    quote = connection.ops.quote_name
    fields = ChatMessage._meta.concrete_fields
    sql = (f"INSERT INTO {quote(ChatMessage._meta.db_table)} ({', '.join(quote(field.column) for field in fields)}) "
           f"VALUES ({', '.join(['%s'] * len(fields))})")
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_BATCH):
            cursor.executemany(sql, [[field.get_db_prep_save(getattr(row, field.attname), connection)
                                      for field in fields] for row in rows[start:start + INSERT_BATCH]])
