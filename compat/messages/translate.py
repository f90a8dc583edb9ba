"""A Messages request in the runtime's types: its blocks as Messages (tool results as tool messages), its fields
as the chat fields the runtime carries, and Anthropic's own fields kept for an Anthropic-format route."""

from __future__ import annotations

from typing import Any

from agentsite.agent.types import (
    MAX_MESSAGE_CHARS,
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    ModelSettings,
    TextPart,
    ToolCall,
    ToolSpec,
)
from agentsite.agent.usage import prompt_estimate
from agentsite.core.errors import AppError
from compat.messages.wire import (
    BLOCK_FIELDS,
    IGNORED_BLOCK_FIELDS,
    NATIVE,
    SERVICE_TIERS,
    ContentBlock,
    Conversation,
    MessagesRequest,
    ToolChoice,
)
from compat.run import Run


def invalid(param: str, message: str, code: str = "invalid_value") -> AppError:
    return AppError(code, f"{param}: {message}", 400, {param: [message]})


def to_chat_request(body: Conversation) -> ChatRequest:
    """The runtime's request. Raises AppError 400 naming the field (a block with another type's field, a tool
    result that answers no tool_use of the message before, a tool_use left unanswered, a message over 32,000
    characters)."""
    messages: list[Message] = []
    if isinstance(body.system, str) and body.system:
        messages.append(Message("system", body.system))
    elif isinstance(body.system, list) and body.system:
        for index, block in enumerate(body.system):
            _no_citations(f"system.{index}", block.citations)
        messages.append(Message("system", "\n\n".join(block.text for block in body.system)))
    names: dict[str, str] = {}
    asked: set[str] = set()  # the tool_use ids of the assistant message before this one
    for index, message in enumerate(body.messages):
        where = f"messages.{index}.content"
        blocks = ([ContentBlock(type="text", text=message.content)] if isinstance(message.content, str)
                  else message.content)
        for block_index, block in enumerate(blocks):
            _check_block(f"{where}.{block_index}", block)
        if message.role == "assistant":
            if asked:
                raise invalid(f"messages.{index}", f"tool_use ids {sorted(asked)} of messages.{index - 1} have no "
                              "tool_result block in the user message right after them.")
            messages.append(_assistant(where, blocks))
            asked = {call.id for call in messages[-1].tool_calls}
            names.update({call.id: call.name for call in messages[-1].tool_calls})
            continue
        answered = {block.tool_use_id for block in blocks if block.type == "tool_result"}
        if answered - asked:
            raise invalid(where, f"tool_result blocks answer tool_use ids {sorted(answered - asked)} that the "
                          "message before does not have.")
        if asked - answered:
            raise invalid(f"messages.{index}", f"tool_use ids {sorted(asked - answered)} of messages.{index - 1} "
                          "have no tool_result block in this message.")
        asked = set()
        messages.extend(_user(where, blocks, names))
    return ChatRequest(messages=messages, tools=[ToolSpec(tool.name, tool.description, tool.input_schema)
                                                 for tool in body.tools or []],
                       settings=_settings(body), tool_choice=_tool_choice(body.tool_choice), extra=_extra(body))


def _extra(body: Conversation) -> dict[str, Any]:
    """The request's fields the runtime carries in ChatRequest.extra, by their names there (OpenAI's); the
    engine refuses those the model's upstream cannot carry, under this dialect's names (MessagesCompletion)."""
    if not isinstance(body, MessagesRequest):
        return {}
    extra: dict[str, Any] = {name: getattr(body, name) for name in ("top_p", "top_k")
                             if getattr(body, name) is not None}
    metadata = dict(body.metadata or {})
    user_id = metadata.pop("user_id", None)
    if metadata:
        name = sorted(metadata)[0]
        raise invalid(f"metadata.{name}", "Anthropic's metadata has user_id only.")
    if user_id is not None:
        if not isinstance(user_id, str):
            raise invalid("metadata.user_id", "must be a string.")
        extra["user"] = user_id
    if body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use:
        extra["parallel_tool_calls"] = False
    return extra


def native_fields(body: Conversation) -> dict[str, Any]:
    """The request's NATIVE fields as an Anthropic-format upstream takes them. Breakpoints on blocks, which the
    runtime's messages cannot carry, become the one top-level `cache_control` (Anthropic's automatic caching of
    the longest prefix) when the request has none, with the longest `ttl` any of them asked for."""
    if not isinstance(body, MessagesRequest):
        return {}
    native = {name: getattr(body, name) for name in NATIVE if getattr(body, name) is not None}
    marks = _block_cache_marks(body)
    if "cache_control" not in native and marks:
        ttls = [mark["ttl"] for mark in marks if isinstance(mark.get("ttl"), str)]
        native["cache_control"] = {"type": "ephemeral", **({"ttl": max(ttls, key=_ttl_seconds)} if ttls else {})}
    return native


def _block_cache_marks(body: MessagesRequest) -> list[dict[str, Any]]:
    blocks: list[Any] = [*(body.system if isinstance(body.system, list) else ()), *(body.tools or ())]
    for message in body.messages:
        if isinstance(message.content, list):
            blocks += message.content
            blocks += [inner for block in message.content if isinstance(block.content, list)
                       for inner in block.content]
    return [block.cache_control for block in blocks if block.cache_control]


def _ttl_seconds(ttl: str) -> int:
    """`5m`, `1h` (Anthropic's cache lifetimes) in seconds; 0 for anything else."""
    number, unit = ttl[:-1], ttl[-1:]
    return int(number) * {"s": 1, "m": 60, "h": 3600}.get(unit, 0) if number.isdigit() else 0


def _settings(body: Conversation) -> ModelSettings:
    if not isinstance(body, MessagesRequest):
        return ModelSettings(model=body.model)
    return ModelSettings(model=body.model, temperature=body.temperature, max_tokens=body.max_tokens,
                         stop=body.stop_sequences or None)


def _tool_choice(choice: ToolChoice | None) -> str | dict[str, Any] | None:
    """Anthropic's tool_choice in the runtime's vocabulary (OpenAI's, agentsite/agent/types.py)."""
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name:
            raise invalid("tool_choice.name", 'A tool_choice of type "tool" names the tool.')
        return {"type": "function", "function": {"name": choice.name}}
    return {"any": "required"}.get(choice.type, choice.type)


def _check_block(where: str, block: ContentBlock) -> None:
    required, allowed = BLOCK_FIELDS[block.type]
    extra = sorted(block.model_fields_set - allowed - IGNORED_BLOCK_FIELDS)
    if extra:
        raise invalid(f"{where}.{extra[0]}", f"A {block.type} block has no field {extra[0]!r}.")
    _no_citations(where, block.citations)
    missing = sorted(name for name in required if getattr(block, name) is None)
    if missing:
        raise invalid(f"{where}.{missing[0]}", f"A {block.type} block needs {missing[0]!r}.")


def _parts(where: str, blocks: list[ContentBlock], *, allowed: tuple[str, ...]) -> list[ContentPart]:
    parts: list[ContentPart] = []
    for index, block in enumerate(blocks):
        if block.type not in allowed:
            raise invalid(f"{where}.{index}.type", f"A {block.type} block is not taken here.")
        if block.type == "text":
            parts.append(TextPart(block.text or ""))
        elif block.source is not None:
            try:
                parts.append(ImagePart.from_base64(block.source.media_type, block.source.data))
            except ValueError as exc:
                raise invalid(f"{where}.{index}.source.data", str(exc)) from exc
    length = sum(len(part.text) for part in parts if isinstance(part, TextPart))
    if length > MAX_MESSAGE_CHARS:
        raise invalid(where, f"A message may be at most {MAX_MESSAGE_CHARS} characters (this one has {length}).",
                      code="message_too_long")
    return parts


def _assistant(where: str, blocks: list[ContentBlock]) -> Message:
    parts = _parts(where, [block for block in blocks if block.type != "tool_use"], allowed=("text",))
    calls = [ToolCall(block.id or "", block.name or "", block.input or {}) for block in blocks
             if block.type == "tool_use"]
    return Message("assistant", "".join(part.text for part in parts if isinstance(part, TextPart)), tool_calls=calls)


def _user(where: str, blocks: list[ContentBlock], names: dict[str, str]) -> list[Message]:
    """Tool results become `tool` messages (first, as every upstream wants them right after the calls); the
    text and images become one user message after them."""
    out: list[Message] = []
    rest: list[ContentBlock] = []
    for index, block in enumerate(blocks):
        if block.type != "tool_result":
            rest.append(block)
            continue
        content = block.content
        inner = [ContentBlock(type="text", text=content)] if isinstance(content, str) else (content or [])
        for inner_index, inner_block in enumerate(inner):
            _check_block(f"{where}.{index}.content.{inner_index}", inner_block)
        parts = _parts(f"{where}.{index}.content", inner, allowed=("text", "image"))
        call_id = block.tool_use_id or ""
        out.append(Message("tool", parts, tool_call_id=call_id, name=names.get(call_id),
                           is_error=bool(block.is_error)))
    if rest:
        parts = _parts(where, rest, allowed=("text", "image"))
        out.append(Message("user", parts))
    return out


def _no_citations(where: str, citations: list[Any] | None) -> None:
    """Citations point into document or search-result blocks, which this door does not take: a block may
    carry none (null or [], as the SDK echoes a reply), any other is a 400 naming it."""
    if citations:
        why = "citations point into document blocks, which this server does not take; send none."
        raise AppError("unsupported_parameter", f"{where}.citations: {why}", 400, {f"{where}.citations": [why]})


class MessagesRun(Run):
    """A Messages request's run: a field its upstream cannot carry is refused under this dialect's name;
    Anthropic's own fields (NATIVE) go as they are to an Anthropic-format route, translated to the others."""

    field_names = {"user": "metadata.user_id", "parallel_tool_calls": "tool_choice.disable_parallel_tool_use"}

    def __init__(self, *args: Any, native: dict[str, Any] | None = None, **kwargs: Any):
        self.native = native or {}
        super().__init__(*args, **kwargs)

    def refuse_uncarried(self) -> None:
        targets = self.provider.route.targets if self.provider is not None else ()
        anthropic = bool(targets) and all(target.connection.provider == "anthropic" for target in targets)
        tier = self.native.get("service_tier")
        if tier is not None and not anthropic:  # a chat field for the others (refused where not carried)
            self.request.extra["service_tier"] = SERVICE_TIERS[tier]
        super().refuse_uncarried()
        if anthropic:  # after the unknown-field check: these are known, and sent as they came
            self.request.passthrough.update(self.native)
        # `cache_control` elsewhere: a cache hint that changes no reply, left out (docs/api.md, Messages).


def estimate_input_tokens(request: ChatRequest) -> int:
    """The estimate count_tokens answers: the one usage metering makes before a call (its characters over
    CHARS_PER_TOKEN, plus IMAGE_TOKENS an image: agentsite.agent.usage.prompt_estimate)."""
    return prompt_estimate(request)
