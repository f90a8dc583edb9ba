"""A chat completion request in the runtime's types (ChatRequest): its messages, tools and fields."""

from __future__ import annotations

from typing import Any

from agentsite.agent.types import (
    MAX_MESSAGE_CHARS,
    SAMPLING_FIELDS,
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    ModelSettings,
    TextPart,
    ToolCall,
    ToolSpec,
)
from agentsite.core.errors import AppError
from compat.chat.wire import ChatCompletionRequest, ChatMessageIn, ContentPartImage

# The chat fields carried in ChatRequest.extra: the runtime's, and those only an OpenAI-format upstream takes.
CHAT_EXTRA_FIELDS = (*SAMPLING_FIELDS, "reasoning_effort", "prompt_cache_key", "safety_identifier")


def invalid(param: str, message: str, code: str = "invalid_value") -> AppError:
    """A 400 naming the request field (OpenAI's `param`)."""
    return AppError(code, message, 400, {param: [message]})


def to_messages(request: ChatCompletionRequest) -> list[Message]:
    """The request's messages in the runtime's types. Raises AppError 400 (`message_too_long`, a bad part)."""
    return [_message(index, message) for index, message in enumerate(request.messages)]


def _message(index: int, message: ChatMessageIn) -> Message:
    role = "system" if message.role == "developer" else message.role
    content = _content(index, message.content)
    length = len(content) if isinstance(content, str) else sum(len(part.text) for part in content
                                                                 if isinstance(part, TextPart))
    if length > MAX_MESSAGE_CHARS:
        raise invalid(f"messages[{index}].content", f"A message may be at most {MAX_MESSAGE_CHARS} characters "
                      f"(this one has {length}).", code="message_too_long")
    if role == "assistant" and message.tool_calls:
        calls = [ToolCall.parsed(call.id, call.function.name, call.function.arguments) for call in message.tool_calls]
        return Message("assistant", content, tool_calls=calls, null_content=message.content is None)
    if role == "tool":
        if not message.tool_call_id:
            raise invalid(f"messages[{index}].tool_call_id", "A tool message needs tool_call_id.")
        return Message("tool", content if isinstance(content, str) else "".join(
            part.text for part in content if isinstance(part, TextPart)), tool_call_id=message.tool_call_id,
            name=message.name)
    return Message(role, content)


def _content(index: int, content) -> str | list[ContentPart]:
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[ContentPart] = []
    for part_index, part in enumerate(content):
        if isinstance(part, ContentPartImage):
            try:
                parts.append(ImagePart.from_data_url(part.image_url.url))
            except ValueError as exc:
                raise invalid(f"messages[{index}].content[{part_index}].image_url.url",
                              f"{exc} Remote image URLs are not fetched; send a data URL.") from exc
        else:
            parts.append(TextPart(part.text))
    return parts


def to_chat_request(request: ChatCompletionRequest, model: str, messages: list[Message]) -> ChatRequest:
    stop = [request.stop] if isinstance(request.stop, str) else request.stop
    tools = [ToolSpec(tool.function.name, tool.function.description, tool.function.parameters)
             for tool in request.tools or []]
    settings = ModelSettings(model=model, temperature=request.temperature,
                             max_tokens=request.max_completion_tokens or request.max_tokens, stop=stop)
    # Only the fields the client set: the SDKs send nothing they were not given, and neither do we.
    extra = {name: getattr(request, name) for name in CHAT_EXTRA_FIELDS
             if name in request.model_fields_set and getattr(request, name, None) is not None}
    return ChatRequest(messages=messages, tools=tools, settings=settings, tool_choice=request.tool_choice,
                       response_format=response_format(request), extra=extra)


def chat_request(body: ChatCompletionRequest, unknown: dict[str, Any]) -> ChatRequest:
    """The whole request: its messages and fields, and the fields it does not know (for a passthrough
    connection). Raises AppError 400 naming a field (a message too long, a bad part or format)."""
    request = to_chat_request(body, body.model, to_messages(body))
    request.passthrough = dict(unknown)
    return request


def response_format(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """The request's structured output as the runtime carries it; `text` (the default) is none."""
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if not fmt.json_schema or not isinstance(fmt.json_schema.get("name"), str):
        raise invalid("response_format.json_schema", 'a json_schema format needs json_schema: {"name", "schema"}.')
    return {"type": "json_schema", "json_schema": fmt.json_schema}
