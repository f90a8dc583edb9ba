"""A Responses request in the runtime's types: its items as Messages, its tools, tool_choice and text format,
and its fields as the chat fields the runtime carries (ChatRequest.extra)."""

from __future__ import annotations

from typing import Any

from agentsite.agent.types import MAX_MESSAGE_CHARS, ContentPart, ImagePart, Message, TextPart, ToolCall
from agentsite.core.errors import AppError
from compat.responses.wire import LOGPROBS_INCLUDE, PASSED, ResponseRequest, invalid


def chat_extra(body: ResponseRequest) -> dict[str, Any]:
    """The request's fields the runtime carries as chat fields (ChatRequest.extra, OpenAI's chat names): PASSED
    as they are, `reasoning.effort` as `reasoning_effort`, `include`'s logprobs as `logprobs: true`. An empty
    `reasoning` (or one whose fields are null) asks for nothing."""
    extra = {name: getattr(body, name) for name in PASSED if getattr(body, name) is not None}
    reasoning = body.reasoning
    if reasoning is not None:
        summary = next((name for name in ("summary", "generate_summary") if getattr(reasoning, name) is not None),
                       None)
        if summary is not None:
            why = "a chat completions upstream has no reasoning summary; leave it out."
            raise AppError("unsupported_parameter", f"reasoning.{summary}: {why}", 400,
                           {f"reasoning.{summary}": [why]})
        if reasoning.effort is not None:
            extra["reasoning_effort"] = reasoning.effort
    if LOGPROBS_INCLUDE in (body.include or ()):
        extra["logprobs"] = True
    if body.truncation == "auto":  # this door never drops items: over the context is the upstream's 400
        why = 'this server does not truncate a conversation; send "disabled" (the default).'
        raise AppError("unsupported_parameter", f"truncation: {why}", 400, {"truncation": [why]})
    return extra



def input_items(body: ResponseRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    if isinstance(body.input, str):
        return [{"type": "message", "role": "user", "content": body.input}]
    return list(body.input)


def to_messages(items: list[dict[str, Any]], *, where: str = "input") -> list[Message]:
    """Responses items -> the runtime's Messages: function_call items join the assistant message before them,
    function_call_output items are tool messages. Raises AppError 400 naming the item's field."""
    messages: list[Message] = []
    names: dict[str, str] = {}
    for index, item in enumerate(items):
        at = f"{where}[{index}]"
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(at, item))
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                raise invalid(f"{at}.call_id", "a function_call item needs call_id and name (strings).")
            arguments = item.get("arguments", "")
            if not isinstance(arguments, str):
                raise invalid(f"{at}.arguments", "must be a string of JSON.")
            names[call_id] = name
            call = ToolCall.parsed(call_id, name, arguments)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                last.tool_calls.append(call)
            else:
                messages.append(Message("assistant", "", tool_calls=[call]))
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise invalid(f"{at}.call_id", "a function_call_output item needs call_id (a string).")
            if isinstance(output, list):
                output = "".join(part.get("text", "") for part in output if isinstance(part, dict))
            if not isinstance(output, str):
                raise invalid(f"{at}.output", "must be a string (or a list of text parts).")
            check_length(f"{at}.output", len(output))
            messages.append(Message("tool", output, tool_call_id=call_id, name=names.get(call_id)))
        else:
            raise invalid(f"{at}.type", f"item type {kind!r} is not supported here (message, function_call and "
                           "function_call_output are).")
    return messages


def check_length(param: str, length: int) -> None:
    if length > MAX_MESSAGE_CHARS:
        raise invalid(param, f"a message may be at most {MAX_MESSAGE_CHARS} characters (this one has {length}).",
                       code="message_too_long")


def _message(at: str, item: dict[str, Any]) -> Message:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise invalid(f"{at}.role", "must be user, assistant, system or developer.")
    content = item.get("content", "")
    if isinstance(content, str):
        check_length(f"{at}.content", len(content))
        return Message("system" if role == "developer" else role, content)
    if not isinstance(content, list):
        raise invalid(f"{at}.content", "must be a string or a list of content parts.")
    parts: list[ContentPart] = []
    for part_index, part in enumerate(content):
        where = f"{at}.content[{part_index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append(TextPart(part["text"]))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(TextPart(part["refusal"]))
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise invalid(f"{where}.image_url", "an input_image needs image_url (file_id is not supported).")
            try:
                parts.append(ImagePart.from_data_url(url))
            except ValueError as exc:
                raise invalid(f"{where}.image_url", f"{exc} Remote image URLs are not fetched; send a data URL."
                               ) from exc
        else:
            raise invalid(f"{where}.type", "content parts are input_text (or output_text) with text, or "
                           "input_image with a data URL.")
    check_length(f"{at}.content", sum(len(part.text) for part in parts if isinstance(part, TextPart)))
    return Message("system" if role == "developer" else role, parts)


def tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """Responses' tool_choice in the runtime's (OpenAI chat) vocabulary."""
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise invalid("tool_choice", 'must be "none", "auto", "required" or {"type": "function", "name": ...}.')


def response_format(body: ResponseRequest) -> dict[str, Any] | None:
    fmt = body.text.format if body.text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if not fmt.name or fmt.schema_ is None:
        raise invalid("text.format", "a json_schema format needs name and schema.")
    schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    if fmt.description:
        schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": schema}
