"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API as a door to every model /v1 serves.

A Messages request is translated into the runtime's provider-neutral ChatRequest (agentsite/agent/types.py) and
answered through compat.engine.Completion, exactly as a chat completion is: the catalogue's router (any upstream
wire format), the `agent` model, `workflow:*` sources, usage metering and budgets, the hang-up that cancels the
upstream. Only the two ends are this dialect's: the request models below and the rendering of the reply (a
message object, or the typed SSE events `message_start` ... `message_stop`). Every error leaves in Anthropic's
shape (`{"type": "error", "error": {"type", "message"}}`), so the `anthropic` SDK raises the matching class.

Fields: what a model below declares is supported; `service_tier` and `cache_control` go as they are to an
Anthropic-format upstream (NATIVE) and are translated or, for cache hints only, left out for the others
(docs/api.md says why); an unknown top-level field goes to a passthrough connection; any other field anywhere in
the body is a 400 naming it.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import ConfigDict, Field, ValidationError

from accounts.authentication import revocable
from agentsite.agent.config import aget_settings
from agentsite.agent.types import (
    MAX_MESSAGE_CHARS,
    ChatRequest,
    ContentPart,
    Finish,
    ImagePart,
    Message,
    ModelSettings,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from agentsite.agent.usage import CHARS_PER_TOKEN, Caller, prompt_chars
from agentsite.core.errors import AppError, anthropic_envelope
from agentsite.core.sse import json_text, sse_event, sse_response
from compat import engine
from compat.limits import parsed_body
from compat.schemas import WireModel

logger = logging.getLogger(__name__)

# count_tokens: what one image counts for. Anthropic charges about width*height/750 tokens and scales images down
# to about 1.15 megapixels, so 1,600 is the most an image costs there; the estimate takes the most.
IMAGE_TOKENS = 1600


# --- the request ----------------------------------------------------------------------------------

class _Wire(WireModel):
    # Unlike the chat completions door, an unknown field is refused, naming it (docs/api.md, Messages): the
    # fields this door ignores are declared and listed.
    model_config = ConfigDict(extra="forbid", strict=True)


class ImageSource(_Wire):
    type: Literal["base64"] = Field(description='"base64" (a "url" source is refused: the server fetches nothing)')
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class ContentBlock(_Wire):
    """One block of a message: `text`, `image`, `tool_use` or `tool_result` (each takes the fields of its type
    only; `cache_control` as the request's, NATIVE; `citations` only empty: this door takes no document to cite)."""

    type: Literal["text", "image", "tool_use", "tool_result"]
    text: str | None = None
    source: ImageSource | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[ContentBlock] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = Field(default=None, description="a prompt cache breakpoint")
    citations: list[Any] | None = Field(default=None, description="empty only (no document blocks here)")


_BLOCK_FIELDS = {"text": ({"text"}, {"text"}), "image": ({"source"}, {"source"}),
                 "tool_use": ({"id", "name", "input"}, {"id", "name", "input"}),
                 "tool_result": ({"tool_use_id"}, {"tool_use_id", "content", "is_error"})}
_IGNORED_BLOCK_FIELDS = {"type", "cache_control", "citations"}  # checked apart (native, _no_citations)


def _no_citations(where: str, citations: list[Any] | None) -> None:
    """Citations point into document or search-result blocks, which this door does not take: a block may
    carry none (null or [], as the SDK echoes a reply), any other is a 400 naming it."""
    if citations:
        why = "citations point into document blocks, which this server does not take; send none."
        raise AppError("unsupported_parameter", f"{where}.citations: {why}", 400, {f"{where}.citations": [why]})


class MessageParam(_Wire):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class SystemBlock(_Wire):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = Field(default=None, description="a prompt cache breakpoint")
    citations: list[Any] | None = Field(default=None, description="empty only (no document blocks here)")


class ToolParam(_Wire):
    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = Field(default=None, description='only "custom": server tools are refused')
    cache_control: dict[str, Any] | None = Field(default=None, description="a prompt cache breakpoint")


class ToolChoice(_Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(default=None, description='the tool, with type "tool"')
    disable_parallel_tool_use: bool | None = Field(default=None, description="true: one tool call a turn at most")


class _Conversation(_Wire):
    model: str = Field(min_length=1, description='a model of GET /v1/models: the catalogue, "agent", "workflow:<name>"')
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[SystemBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None


class MessagesRequest(_Conversation):
    max_tokens: int = Field(ge=1, description="required, as Anthropic has it")
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=1)
    stop_sequences: list[str] | None = None
    # Carried to the upstream, or refused naming them where it cannot carry them (docs/api.md, Messages):
    metadata: dict[str, Any] | None = Field(default=None, description="user_id only")
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    # As they are to an Anthropic-format upstream, translated or left out for the others (NATIVE):
    service_tier: Literal["auto", "standard_only"] | None = None
    cache_control: dict[str, Any] | None = Field(default=None, description="automatic prompt caching")


class CountTokensRequest(_Conversation):
    pass


# Anthropic's own fields (top-level `cache_control` standing for the blocks' too), sent as they are when every
# upstream the model may route to speaks Anthropic's dialect (MessagesCompletion).
NATIVE = ("service_tier", "cache_control")
# `service_tier` in OpenAI's chat vocabulary, for an OpenAI-format upstream.
SERVICE_TIERS = {"auto": "auto", "standard_only": "default"}


# --- the request in the runtime's types -----------------------------------------------------------

def invalid(param: str, message: str, code: str = "invalid_value") -> AppError:
    return AppError(code, f"{param}: {message}", 400, {param: [message]})


def to_chat_request(body: _Conversation) -> ChatRequest:
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


def _extra(body: _Conversation) -> dict[str, Any]:
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


def native_fields(body: _Conversation) -> dict[str, Any]:
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


def _settings(body: _Conversation) -> ModelSettings:
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
    required, allowed = _BLOCK_FIELDS[block.type]
    extra = sorted(block.model_fields_set - allowed - _IGNORED_BLOCK_FIELDS)
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


# --- the reply ------------------------------------------------------------------------------------

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "max_rounds": "max_tokens", "tool_calls": "tool_use",
                "content_filter": "refusal"}


def stop_reason(finish: str, stop_sequence: str | None = None) -> str:
    return "stop_sequence" if stop_sequence is not None else STOP_REASONS.get(finish, "end_turn")


def stop_sequence_of(said: str | None, asked: list[str] | None) -> str | None:
    """The stop sequence to answer: the one the source said the reply stopped on (Finish.stop_sequence), if the
    request asked for it; else None (the source did not say: an OpenAI-format upstream, `agent`, a workflow)."""
    return said if said is not None and said in (asked or ()) else None


def message_id() -> str:
    return f"msg_{secrets.token_hex(16)}"


def _usage(usage: Usage) -> dict[str, int | bool]:
    out: dict[str, int | bool] = {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}
    if usage.estimated:
        out["estimated"] = True
    return out


def tool_use_block(call: ToolCall) -> dict[str, Any]:
    """A tool_use block. Its `input` must be an object: a call whose arguments the upstream sent as something
    else (invalid JSON) cannot be said here, and is the upstream's error (AppError 502 `upstream_error`)."""
    if call.arguments_error:
        raise AppError("upstream_error", f"The upstream's tool call {call.name!r} ({call.id}) cannot be a tool_use "
                       f"block: {call.arguments_error}", 502)
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}


def message_object(*, mid: str, model: str, text: str, calls: list[ToolCall], finish: str,
                   usage: Usage, stop_sequence: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [tool_use_block(call) for call in calls]
    return {"id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason(finish, stop_sequence), "stop_sequence": stop_sequence,
            "usage": _usage(usage)}


def _event(data: dict[str, Any]) -> bytes:
    return sse_event(data, data["type"])


async def message_events(first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]], *, mid: str,
                         model: str, stops: list[str] | None = None) -> AsyncIterator[bytes]:
    """The typed events of Anthropic's stream for `first` and then each batch; the events of one batch leave as
    one piece of bytes. A text block stays open until a tool call or the end; a tool call is one tool_use block
    whose input arrives as one input_json_delta. `message_delta` names the stop sequence of `stops` the reply
    ended on, when the source said (stop_sequence_of). A client hang-up cancels this and, with it, the
    upstream."""
    start = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
             "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
    out = [_event({"type": "message_start", "message": start}), _event({"type": "ping"})]
    usage = Usage()
    finish = "stop"
    stopped_on: str | None = None
    index = -1
    text_open = False

    def render(batch: list[StreamEvent]) -> None:
        nonlocal usage, finish, stopped_on, index, text_open
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                if not text_open:
                    index += 1
                    text_open = True
                    out.append(_event({"type": "content_block_start", "index": index,
                                       "content_block": {"type": "text", "text": ""}}))
                # Most of a stream's events: bytes from a template, as _event would give them, without building
                # and encoding the object each time.
                out.append(b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": '
                           + str(index).encode() + b', "delta": {"type": "text_delta", "text": '
                           + json_text(event.text) + b"}}\n\n")
            elif isinstance(event, ToolCallEvent):
                if text_open:
                    out.append(_event({"type": "content_block_stop", "index": index}))
                    text_open = False
                index += 1
                out.append(_event({"type": "content_block_start", "index": index,
                                   "content_block": {**tool_use_block(event.call), "input": {}}}))
                out.append(_event({"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(event.call.arguments)}}))
                out.append(_event({"type": "content_block_stop", "index": index}))
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, Finish):
                finish, stopped_on = event.reason, stop_sequence_of(event.stop_sequence, stops)

    try:
        async with aclosing(batches):
            render(first)
            yield b"".join(out)
            out.clear()
            async for batch in batches:
                render(batch)
                if out:
                    yield b"".join(out)
                    out.clear()
    except AppError as exc:  # a started stream ends with an error event, which the SDK raises
        out.append(error_event(exc))
        yield b"".join(out)
        return
    except Exception:  # a boundary: never a hanging or broken stream
        logger.exception("The /v1/messages stream failed")
        out.append(error_event(AppError("internal_error", "The server failed; the error was logged.", 500)))
        yield b"".join(out)
        return
    if text_open:
        out.append(_event({"type": "content_block_stop", "index": index}))
    out.append(_event({"type": "message_delta", "delta": {"stop_reason": stop_reason(finish, stopped_on),
                                                          "stop_sequence": stopped_on}, "usage": _usage(usage)}))
    out.append(_event({"type": "message_stop"}))
    yield b"".join(out)


# --- errors ---------------------------------------------------------------------------------------

def error_response(exc: AppError) -> JsonResponse:
    """An AppError in Anthropic's error shape, with its status (the SDK picks its exception class by status)."""
    response = JsonResponse(anthropic_envelope(exc.status, exc.message), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    if exc.status == 401 and "WWW-Authenticate" not in exc.headers:  # as every 401 of the service says
        response["WWW-Authenticate"] = 'Bearer realm="v1"'
    return response


def error_event(exc: AppError) -> bytes:
    return sse_event(anthropic_envelope(exc.status, exc.message), "error")


def _parse(request: HttpRequest, schema: type[_Conversation]) -> tuple[Any, dict[str, Any]]:
    """(the request, its top-level fields this door does not know). Those go to a passthrough connection (or
    are refused, engine.Completion.refuse_unknown) on a message; count_tokens, which sends nothing, refuses
    them here."""
    body = parsed_body(request, items="messages")
    unknown: dict[str, Any] = {}
    if schema is MessagesRequest:
        unknown = {name: body.pop(name) for name in list(body) if name not in schema.model_fields}
    try:
        return schema.model_validate(body), unknown
    except ValidationError as exc:
        from compat.api import _telling_error

        path, error = _telling_error(exc)
        param = ".".join(str(part) for part in path) or None
        text = "This field is not supported (docs/api.md, Messages)." if error["type"] == "extra_forbidden" else (
            error["msg"])
        message = f"{param}: {text}" if param else text
        raise AppError("unknown_field" if error["type"] == "extra_forbidden" else "invalid_value", message, 400,
                       {param: [text]} if param else {}) from exc


# --- the views ------------------------------------------------------------------------------------

def _view(handler: Any) -> Any:
    """A POST-only async view whose every error leaves in Anthropic's shape."""

    @csrf_exempt
    async def view(request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            response = error_response(AppError("method_not_allowed", "Use POST.", 405))
            response["Allow"] = "POST"
            return response
        try:
            return await handler(request)
        except AppError as exc:
            return error_response(exc)
        except Exception:  # a boundary: a 500 in Anthropic's shape, logged
            logger.exception("Unhandled error on %s", request.path)
            return error_response(AppError("internal_error", "The server failed; the error was logged.", 500))

    return view


class MessagesCompletion(engine.Completion):
    """A Messages request's completion: a field its upstream cannot carry is refused under this dialect's name;
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


async def _completion(request: HttpRequest, schema: type[_Conversation]) -> tuple[engine.Completion, Any, Any]:
    """(completion, credential, body): the caller authenticated first (401/403 before any 400), then the body."""
    from compat.api import _caller

    user, credential = await _caller(request)
    body, unknown = _parse(request, schema)
    chat_request = to_chat_request(body)
    chat_request.passthrough = unknown
    caller = Caller.with_key(getattr(user, "pk", None), getattr(request, "api_key", None), "v1")
    completion = MessagesCompletion(None, settings=await aget_settings(), user=user, caller=caller,
                                    request=chat_request, native=native_fields(body))
    # ^ 404 model_not_found; 400 a field it cannot carry
    return completion, credential, body


async def _messages(request: HttpRequest) -> HttpResponse:
    completion, credential, body = await _completion(request, MessagesRequest)
    mid = message_id()
    if body.stream:
        first, batches = await completion.opened()  # an upstream that refuses: an error status, not an event
        stream = message_events(first, batches, mid=mid, model=completion.model, stops=body.stop_sequences)
        if credential is not None:  # the stream ends at its next event once the token or key is revoked
            stream = revocable(stream, None, error_event, credential=credential)
        response: HttpResponse = sse_response(stream)
    else:
        reply = await completion.reply()
        response = JsonResponse(message_object(
            mid=mid, model=completion.model, text=reply.text, calls=reply.tool_calls, finish=reply.finish_reason,
            usage=reply.usage, stop_sequence=stop_sequence_of(reply.stop_sequence, body.stop_sequences)))
    for name, value in completion.headers().items():
        response[name] = value
    return response


def estimate_input_tokens(request: ChatRequest) -> int:
    """The estimate count_tokens answers: the characters of the prompt (messages, tool calls, tool definitions,
    as usage metering counts them before a call) over CHARS_PER_TOKEN, plus IMAGE_TOKENS per image."""
    images = sum(len(message.images) for message in request.messages)
    return math.ceil(prompt_chars(request) / CHARS_PER_TOKEN) + images * IMAGE_TOKENS


async def _count_tokens(request: HttpRequest) -> HttpResponse:
    completion, _, _ = await _completion(request, CountTokensRequest)  # the same checks as a message
    return JsonResponse({"input_tokens": estimate_input_tokens(completion.request)})


messages = _view(_messages)
count_tokens = _view(_count_tokens)
