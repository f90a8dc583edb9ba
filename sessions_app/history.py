"""Stored messages -> the runtime's provider-neutral messages (the history an agent turn is given)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentsite.agent.types import ContentPart, Message, TextPart, ToolCall
from sessions_app.models import ChatMessage
from sessions_app.selectors import HistoryMessage


def to_agent_messages(stored: Iterable[ChatMessage | HistoryMessage],
                      attachment_parts: dict[str, list[ContentPart]] | None = None) -> list[Message]:
    """The conversation as the agent sees it; an assistant turn expands to its calls, results and reply."""
    parts_by_id = attachment_parts or {}
    messages: list[Message] = []
    for message in stored:
        if message.role == "user":
            extra = [part for upload_id in message.attachments for part in parts_by_id.get(str(upload_id), [])]
            content: str | list[ContentPart] = [TextPart(message.content), *extra] if extra else message.content
            messages.append(Message("user", content))
        elif message.role == "assistant" and message.status != "streaming":  # another turn still going on
            messages.extend(_assistant_turn(message))
    return _merge_user_runs(messages)


def _merge_user_runs(messages: list[Message]) -> list[Message]:
    """Join consecutive user messages (a turn whose client left before any reply): providers that
    require alternating roles (Anthropic) would refuse the history otherwise."""
    merged: list[Message] = []
    for message in messages:
        if merged and message.role == "user" and merged[-1].role == "user":
            previous = merged[-1]
            if previous.images or message.images:
                # No whitespace-only part between them: Anthropic refuses an empty text block.
                merged[-1] = Message("user", [*previous.parts, *message.parts])
            else:
                merged[-1] = Message("user", f"{previous.text}\n\n{message.text}")
        else:
            merged.append(message)
    return merged


def _assistant_turn(message: ChatMessage | HistoryMessage) -> list[Message]:
    calls = [call for call in message.tool_calls if isinstance(call, dict) and call.get("id")]
    turn: list[Message] = []
    answered = [call for call in calls if call.get("result") is not None]
    if answered:
        turn.append(Message("assistant", "", tool_calls=[
            ToolCall(call["id"], call.get("name", ""), call.get("arguments") or {}) for call in answered]))
        for call in answered:
            result = call["result"]
            turn.append(Message("tool", _result_text(result), tool_call_id=call["id"], name=call.get("name"),
                                is_error=bool(result.get("is_error"))))
    if message.content:
        turn.append(Message("assistant", message.content))
    return turn


def _result_text(result: dict[str, Any]) -> str:
    content = result.get("content")
    return content if isinstance(content, str) else str(content or "")
