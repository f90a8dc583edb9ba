"""What an import reads a document into, whatever its format (agentsite's own export, ChatGPT's), and the checks
that name where a document is wrong.

A reader turns a document into ImportedSession values or raises AppError 400 (`invalid`, or `message_too_long`)
whose details name the place (`messages.3.parent`, `conversations.2.mapping.<node>.parent`); nothing is stored
before every session of a document has been read (sessions_app.transfer stores them in one transaction).
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass, field
from typing import Any

from agentsite.agent.types import MAX_MESSAGE_CHARS
from agentsite.core.errors import AppError
from agentsite.core.validation import storable

# The most conversations (sessions) and messages one import may hold; a larger export is imported in parts.
MAX_IMPORT_SESSIONS = 1000
MAX_IMPORT_MESSAGES = 50_000
# JSON objects and arrays in one import's body, counted before it is parsed: a real export holds one per ~60 bytes
# or more, while 20 MB of `{},` would make json.loads hold ~7 million dicts (~600 MB) before any count was read.
MAX_IMPORT_CONTAINERS = 1_000_000
# The name of a session whose document gives none (a ChatGPT conversation with a null title).
UNTITLED = "Imported chat"
NAME_MAX = 200  # ChatSession.name


@dataclass
class ImportedMessage:
    """A message as read: `key` is its id in the document (links only: the stored message gets a fresh id) and
    `parent_key` its parent's (None: a first question). The other fields are ChatMessage's."""

    key: str
    parent_key: str | None
    role: str
    content: str
    created_at: datetime.datetime | None = None
    attachments: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    status: str = "complete"
    finish_reason: str = ""
    model: str = ""
    agent: str = ""
    ttft_ms: int | None = None


@dataclass
class ImportedSession:
    """A session as read: its messages in tree order (a parent before its children, siblings oldest first) and
    the key of its current message (None: the newest leaf)."""

    name: str
    messages: list[ImportedMessage]
    current_key: str | None = None
    model: str = ""
    agent: str | None = None
    pinned: bool = False
    archived: bool = False
    created_at: datetime.datetime | None = None
    updated_at: datetime.datetime | None = None


def invalid_at(path: str, problem: str, code: str = "invalid") -> AppError:
    """The 400 for a document wrong at `path` (dotted: `conversations.3.mapping.abc.parent`)."""
    return AppError(code, f"The import is not valid at {path}: {problem}", 400, {path: [problem]})


def object_at(value: Any, path: str) -> dict[str, Any]:
    """`value` when it is a JSON object, else the 400 naming `path`."""
    if not isinstance(value, dict):
        raise invalid_at(path, "Expected an object.")
    return value


def list_at(value: Any, path: str) -> list[Any]:
    """`value` when it is a JSON array, else the 400 naming `path`."""
    if not isinstance(value, list):
        raise invalid_at(path, "Expected an array.")
    return value


def texts_checked(value: Any, path: str = "") -> None:
    """Every string of a parsed document (keys too) is storable text, else the 400 naming the first that is not:
    a NUL or a lone surrogate, which JSON can carry and PostgreSQL refuses (a 500 on store otherwise)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                raise invalid_at(where or "body", "Text with a NUL character or a lone surrogate (not UTF-8 text).")
        elif isinstance(item, dict):
            for key, inner in item.items():
                inner_path = f"{where}.{key}" if where else str(key)
                if not storable(key):
                    raise invalid_at(where or "body", "A key with a NUL character or a lone surrogate.")
                stack.append((inner, inner_path))
        elif isinstance(item, list):
            stack.extend((inner, f"{where}.{index}" if where else str(index)) for index, inner in enumerate(item))


def text_at(value: Any, path: str, *, optional: bool = False, max_length: int | None = None) -> str | None:
    """`value` when it is a string (None too when `optional`), at most `max_length` long, else the 400."""
    if value is None and optional:
        return None
    if not is_text(value):
        raise invalid_at(path, "Expected a string (without NUL characters or lone surrogates).")
    if max_length is not None and len(value) > max_length:
        raise invalid_at(path, f"At most {max_length} characters.")
    return value


def is_text(value: Any) -> bool:
    """Whether `value` is a string a column can store (no NUL, no lone surrogate)."""
    return isinstance(value, str) and storable(value)


def json_at(value: Any, path: str) -> Any:
    """`value` (parsed JSON) when a JSON column can store it: no lone surrogate in any string or key, else the 400."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise invalid_at(path, "Holds text that is not valid Unicode (a lone surrogate).") from None
    return value


def content_at(value: str, path: str) -> str:
    """A message's text, refused past MAX_MESSAGE_CHARS (as the chat refuses it) or with what no column takes."""
    if not is_text(value):
        raise invalid_at(path, "Holds a NUL character or a lone surrogate.")
    if len(value) > MAX_MESSAGE_CHARS:
        raise invalid_at(path, f"{len(value)} characters; a message may be at most {MAX_MESSAGE_CHARS}.",
                         "message_too_long")
    return value


def epoch_at(value: Any, path: str) -> datetime.datetime | None:
    """A Unix time in seconds (ChatGPT's create_time), or None; anything else is the 400."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid_at(path, "Expected a Unix time in seconds, or null.")
    try:
        return datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        raise invalid_at(path, "Out of range.") from None


def iso_at(value: Any, path: str) -> datetime.datetime | None:
    """An ISO 8601 time with its offset (an export's timestamps), or None; anything else is the 400."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_at(path, "Expected an ISO 8601 time, or null.")
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise invalid_at(path, "Expected an ISO 8601 time, or null.") from None
    try:  # stored in UTC: an offset may carry 0001-01-01 or 9999-12-31 out of the calendar (a 500 at the insert)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)).astimezone(datetime.UTC)
    except OverflowError:
        raise invalid_at(path, "Out of range.") from None


def _typed_at(value: Any, path: str, types: tuple[type, ...], expected: str) -> Any:
    if value is not None and (isinstance(value, bool) is not (bool in types) or not isinstance(value, types)):
        raise invalid_at(path, f"Expected {expected}, or null.")
    return value


def tool_call_at(value: Any, path: str) -> dict[str, Any]:
    """A stored tool call as a turn records it (agentsite.agent.loop: `{id, name, arguments, result: {content,
    is_error, duration_ms} | null}`), its other fields dropped; anything else is the 400. Every reader of a
    reply (its steps, the history of the next turn, the export, the page) takes these types as they are."""
    call = object_at(value, path)
    result = call.get("result")
    if result is not None:
        result = object_at(result, f"{path}.result")
        result = {"content": text_at(result.get("content", ""), f"{path}.result.content"),
                  "is_error": _typed_at(result.get("is_error", False), f"{path}.result.is_error", (bool,),
                                        "true or false") or False,
                  "duration_ms": _typed_at(result.get("duration_ms"), f"{path}.result.duration_ms", (int,),
                                           "a whole number")}
    return {"id": text_at(call.get("id", ""), f"{path}.id", max_length=200),
            "name": text_at(call.get("name", ""), f"{path}.name", max_length=200),
            "arguments": json_at(object_at(call.get("arguments", {}), f"{path}.arguments"), f"{path}.arguments"),
            "result": result}


def source_at(value: Any, path: str) -> dict[str, Any]:
    """A stored source as a turn records it (knowledge.selectors ChunkHit.as_source), its other fields dropped;
    anything else is the 400."""
    source = object_at(value, path)
    collection = source.get("collection")
    if collection is not None:
        collection = object_at(collection, f"{path}.collection")
        collection = {"id": text_at(collection.get("id"), f"{path}.collection.id", optional=True),
                      "name": text_at(collection.get("name"), f"{path}.collection.name", optional=True) or ""}
    document = object_at(source.get("document", {}), f"{path}.document")
    return {"collection": collection,
            "document": {"id": text_at(document.get("id"), f"{path}.document.id", optional=True),
                         "filename": text_at(document.get("filename"), f"{path}.document.filename",
                                             optional=True) or ""},
            "chunk_index": _typed_at(source.get("chunk_index"), f"{path}.chunk_index", (int,), "a whole number"),
            "score": _typed_at(source.get("score"), f"{path}.score", (int, float), "a number"),
            "rank_score": _typed_at(source.get("rank_score"), f"{path}.rank_score", (int, float), "a number"),
            "text": text_at(source.get("text", ""), f"{path}.text")}


def count_check(sessions: int, messages: int) -> None:
    """The import's size against MAX_IMPORT_SESSIONS and MAX_IMPORT_MESSAGES (400 `invalid` naming the list)."""
    if sessions > MAX_IMPORT_SESSIONS:
        raise invalid_at("conversations", f"{sessions} conversations; an import may hold at most "
                         f"{MAX_IMPORT_SESSIONS} (import the rest in another file).")
    if messages > MAX_IMPORT_MESSAGES:
        raise invalid_at("messages", f"{messages} messages; an import may hold at most {MAX_IMPORT_MESSAGES} "
                         "(import the rest in another file).")


def tree_order(messages: list[ImportedMessage], path: str) -> list[ImportedMessage]:
    """The messages in tree order: depth first from the roots, siblings in the order given. A parent that names
    no message, or a loop, is the 400 naming `<path>.<key>.parent` (`path`: where the keys are, a mapping)."""
    keys = {message.key for message in messages}
    children: dict[str | None, list[ImportedMessage]] = {}
    for message in messages:
        if message.parent_key is not None and message.parent_key not in keys:
            raise invalid_at(f"{path}.{message.key}.parent", "Names no message of this conversation.")
        children.setdefault(message.parent_key, []).append(message)
    ordered: list[ImportedMessage] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        message = stack.pop()
        ordered.append(message)
        stack.extend(reversed(children.get(message.key, [])))
    if len(ordered) != len(messages):
        placed = {message.key for message in ordered}
        looped = next(message for message in messages if message.key not in placed)
        raise invalid_at(f"{path}.{looped.key}.parent", "The parents form a loop.")
    return ordered
