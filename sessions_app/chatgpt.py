"""ChatGPT's data export (`conversations.json`) read into sessions to import (docs/api.md, Import).

A conversation is a tree of nodes (`mapping`), each with a `parent` and a `message` (null at the root). What is
kept: the user's and the assistant's visible text messages (`content_type` `text` or `multimodal_text`, for
everyone: `recipient` `all`). What is skipped: the null root, system and tool nodes, hidden nodes (custom
instructions, memory), an assistant's calls to a tool and any other content type (code, browsing, reasoning);
a kept node's parent is its nearest kept ancestor, so branches (edits, regenerations) stay siblings. A node that
then follows one of the same role as its only child is joined to it (an answer split around a tool call is one
reply). A non-text part of a kept message (an image, a file) becomes `[attachment not imported]`.
"""

from __future__ import annotations

from typing import Any

from agentsite.agent.types import MAX_MESSAGE_CHARS
from sessions_app.importdoc import (
    NAME_MAX,
    UNTITLED,
    ImportedMessage,
    ImportedSession,
    content_at,
    count_check,
    epoch_at,
    invalid_at,
    is_text,
    list_at,
    object_at,
    text_at,
    tree_order,
)

KEPT_ROLES = ("user", "assistant")
KEPT_CONTENT = ("text", "multimodal_text")
NOT_IMPORTED = "[attachment not imported]"


def chatgpt_read(document: list[Any]) -> list[ImportedSession]:
    """Each conversation of the export as a session to import; raises AppError 400 naming where it is wrong
    (`conversations.N...`), or past the import's limits."""
    conversations = list_at(document, "conversations")
    nodes = sum(len(conversation.get("mapping") or {}) for conversation in conversations
                if isinstance(conversation, dict) and isinstance(conversation.get("mapping"), dict))
    count_check(len(conversations), nodes)
    return [_conversation(conversation, f"conversations.{index}") for index, conversation in enumerate(conversations)]


def _conversation(value: Any, path: str) -> ImportedSession:
    conversation = object_at(value, path)
    title = (text_at(conversation.get("title"), f"{path}.title", optional=True) or "").strip()
    mapping = object_at(conversation.get("mapping"), f"{path}.mapping")
    where = f"{path}.mapping"
    parents: dict[str, str | None] = {}
    kept: dict[str, ImportedMessage] = {}
    for key, node in mapping.items():
        node = object_at(node, f"{where}.{key}")
        parent = text_at(node.get("parent"), f"{where}.{key}.parent", optional=True)
        if parent is not None and parent not in mapping:
            raise invalid_at(f"{where}.{key}.parent", "Names no node of this conversation.")
        parents[key] = parent
        message = _message(node.get("message"), f"{where}.{key}.message", key)
        if message is not None:
            kept[key] = message
    found: dict[str, str | None] = {}  # node -> its nearest kept ancestor, each walk's nodes once
    for message in kept.values():
        message.parent_key = _kept_ancestor(parents, kept, parents[message.key], f"{where}.{message.key}.parent",
                                            found)
    ordered = tree_order(sorted(kept.values(), key=_oldest_first), where)
    aliases = _join_runs(ordered)
    current = text_at(conversation.get("current_node"), f"{path}.current_node", optional=True)
    if current is not None and current not in mapping:
        raise invalid_at(f"{path}.current_node", "Names no node of this conversation.")
    current_key = current if current in kept else _kept_ancestor(parents, kept, parents.get(current or ""),
                                                                           f"{path}.current_node", found)
    return ImportedSession(
        name=title[:NAME_MAX].strip() or UNTITLED, messages=[message for message in ordered
                                                             if message.key not in aliases],
        current_key=aliases.get(current_key, current_key) if current_key is not None else None,
        created_at=epoch_at(conversation.get("create_time"), f"{path}.create_time"),
        updated_at=epoch_at(conversation.get("update_time"), f"{path}.update_time"))


def _oldest_first(message: ImportedMessage) -> tuple[bool, float]:
    return message.created_at is None, message.created_at.timestamp() if message.created_at else 0.0


def _kept_ancestor(parents: dict[str, str | None], kept: dict[str, ImportedMessage], start: str | None,
                   path: str, found: dict[str, str | None]) -> str | None:
    """The nearest kept node from `start` up (`start` itself when kept); a loop of parents is the 400. `found`
    remembers the answer for every skipped node walked, so many messages below one long chain of skipped nodes
    walk it once (without it, 20,000 replies below 20,000 hidden nodes took minutes)."""
    node, trail = start, []
    while node is not None and node not in kept and node not in found:
        trail.append(node)
        if len(trail) > len(parents):
            raise invalid_at(path, "The parents form a loop.")
        node = parents.get(node)
    answer = found[node] if node is not None and node in found else node
    for skipped in trail:
        found[skipped] = answer
    return answer


def _message(value: Any, path: str, key: str) -> ImportedMessage | None:
    """The node's message as kept, or None when it is skipped (the module's rule)."""
    if value is None:
        return None
    message = object_at(value, path)
    role = text_at(object_at(message.get("author"), f"{path}.author").get("role"), f"{path}.author.role")
    content = object_at(message.get("content"), f"{path}.content")
    content_type = text_at(content.get("content_type"), f"{path}.content.content_type")
    metadata = object_at(message.get("metadata") or {}, f"{path}.metadata")
    created_at = epoch_at(message.get("create_time"), f"{path}.create_time")
    hidden = metadata.get("is_visually_hidden_from_conversation")
    if (role not in KEPT_ROLES or content_type not in KEPT_CONTENT or hidden
            or message.get("recipient", "all") not in ("all", None)):
        return None
    texts = []
    for index, part in enumerate(list_at(content.get("parts", []), f"{path}.content.parts")):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            texts.append(NOT_IMPORTED)
        else:
            raise invalid_at(f"{path}.content.parts.{index}", "Expected a string or an object.")
    text = "\n\n".join(text for text in texts if text.strip())
    if not text.strip():
        return None
    model = metadata.get("model_slug")
    return ImportedMessage(key=key, parent_key=None, role=role, content=content_at(text, f"{path}.content.parts"),
                           created_at=created_at, model=model[:300] if is_text(model) else "")


def _join_runs(ordered: list[ImportedMessage]) -> dict[str, str]:
    """Join each message that follows one of its own role, as that one's only child, to it (tree order: a run of
    three joins into the first); returns the joined keys -> the key they joined."""
    children: dict[str | None, int] = {}
    for message in ordered:
        children[message.parent_key] = children.get(message.parent_key, 0) + 1
    by_key = {message.key: message for message in ordered}
    aliases: dict[str, str] = {}
    for message in ordered:
        original = message.parent_key
        parent = aliases.get(original, original) if original is not None else None
        message.parent_key = parent
        if parent is None or children[original] != 1:
            continue
        target = by_key[parent]
        joined = f"{target.content}\n\n{message.content}"
        if target.role == message.role and len(joined) <= MAX_MESSAGE_CHARS:
            target.content, target.model = joined, target.model or message.model
            aliases[message.key] = parent
    return aliases
