"""POST /v1/responses, GET and DELETE /v1/responses/<id>: OpenAI's Responses API over the same engine as
/v1/chat/completions.

The request's items (a string, or messages with input_text/input_image parts, function_call and
function_call_output items; `instructions`; a stored `previous_response_id`'s conversation) become the runtime's
Messages; its function tools, tool_choice, temperature, max_output_tokens and `text.format` become a ChatRequest.
`ResponseRun` is an `engine.Completion` whose `request` carries them, so the catalogue's router, the
`agent` and `workflow:*` models, usage metering, budgets and hang-ups work exactly as on /v1/chat/completions.
The runtime's stream events are rendered as a response object or as the typed `response.*` SSE events, each with
its `sequence_number`.

Invariants: a field this module does not list in SUPPORTED or IGNORED goes to a passthrough connection or is a
400 naming it (never dropped); a
stored response is seen, continued and deleted by its owner only (another's is a 404 like a missing one);
`store: false` writes nothing.
"""

from __future__ import annotations

import json
import logging
import random
import re
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from django.http import HttpRequest, HttpResponse, JsonResponse
from pydantic import ConfigDict, Field

from agentsite.agent.config import aget_settings
from agentsite.agent.types import (
    MAX_MESSAGE_CHARS,
    ChatRequest,
    Completion,
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
from agentsite.agent.usage import Caller
from agentsite.core.dbcall import db
from agentsite.core.errors import AppError
from agentsite.core.sse import Problem, json_text, sse_event, sse_response
from compat import engine
from compat.limits import parsed_body
from compat.schemas import WireModel

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser
    from django.db.models import QuerySet

    from agentsite.agent.config import AgentSettings
    from compat.models import StoredResponse

logger = logging.getLogger(__name__)

# The request fields carried to the upstream as the chat fields of the same name (ChatRequest.extra), or refused
# naming them where it cannot carry them.
PASSED = ("top_p", "parallel_tool_calls", "metadata", "user", "service_tier", "prompt_cache_key",
          "safety_identifier", "top_logprobs")
# The request fields POST /v1/responses acts on, and those it accepts without effect (docs/api.md says why).
SUPPORTED = ("model", "input", "instructions", "tools", "tool_choice", "temperature", "max_output_tokens", "stream",
             "previous_response_id", "store", "text", "reasoning", "include", "truncation", *PASSED)
IGNORED = ("stream_options",)
# `include` asks for the upstream's token log probabilities with this value; its other values name items of
# built-in tools this door never produces.
LOGPROBS_INCLUDE = "message.output_text.logprobs"


# --- the request ----------------------------------------------------------------------------------

class ResponseFunctionTool(WireModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, description="a JSON Schema object")
    strict: bool | None = None


class ResponseTextFormat(WireModel):
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class ResponseText(WireModel):
    format: ResponseTextFormat | None = None
    verbosity: str | None = None


class Reasoning(WireModel):
    """`reasoning`: its effort is the chat field `reasoning_effort`; a summary no chat completion can carry
    (refused naming `reasoning.summary` when set)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class ResponseRequest(WireModel):
    """POST /v1/responses. Top-level fields outside SUPPORTED and IGNORED go to a passthrough connection as they
    came, or are refused (400 naming the field: engine.Completion.refuse_unknown)."""

    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)

    model: str = Field(min_length=1, description='a catalogue model (GET /v1/models), "agent" or "workflow:<name>"')
    input: str | list[dict[str, Any]] = Field(description="a string, or a list of input items")
    instructions: str | None = None
    tools: list[ResponseFunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_output_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False
    previous_response_id: str | None = None
    store: bool = True
    text: ResponseText | None = None
    top_p: float | None = Field(default=None, ge=0, le=1)
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    reasoning: Reasoning | None = None
    truncation: Literal["auto", "disabled"] | None = Field(default=None, description='"disabled" only')


def new_id(prefix: str) -> str:
    """`prefix_` and 32 random hex digits (128 bits; uuid4's formatting costs five times as much)."""
    return f"{prefix}_{secrets.token_hex(16)}"


def item_id() -> str:
    """An output message item's id: `msg_` and 32 hex digits, unique but not a secret nor a key to anything
    (a stored response is found by its own id, new_id's), so from the process's PRNG: secrets' getrandom
    call cost ~10 us on a VM, per item."""
    return f"msg_{random.getrandbits(128):032x}"


def _invalid(param: str, message: str, code: str = "invalid_value") -> AppError:
    return AppError(code, f"{param}: {message}", 400, {param: [message]})


def parse_request(request: HttpRequest) -> tuple[ResponseRequest, dict[str, Any]]:
    """(the request, its fields this door does not know: for a passthrough connection, else refused)."""
    from compat.api import validate_body

    body = parsed_body(request, items="input")
    unknown = {name: value for name, value in body.items() if name not in SUPPORTED and name not in IGNORED}
    where = _nul_at(body)
    if where is not None:  # a stored response is JSON in the database, and PostgreSQL refuses a NUL in it
        raise _invalid(where, "a NUL character (\\u0000) cannot be stored; remove it.")
    return validate_body(body, ResponseRequest), unknown


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


def _nul_at(value: Any, path: str = "") -> str | None:
    """The path (`input.0.content`) of the first string, as a value or a key, holding a NUL; None without."""
    if isinstance(value, str):
        return (path or "body") if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        at = f"{path}.{key}" if path else str(key)
        if isinstance(key, str) and "\x00" in key:
            return at
        found = _nul_at(item, at)
        if found is not None:
            return found
    return None


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
                raise _invalid(f"{at}.call_id", "a function_call item needs call_id and name (strings).")
            arguments = item.get("arguments", "")
            if not isinstance(arguments, str):
                raise _invalid(f"{at}.arguments", "must be a string of JSON.")
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
                raise _invalid(f"{at}.call_id", "a function_call_output item needs call_id (a string).")
            if isinstance(output, list):
                output = "".join(part.get("text", "") for part in output if isinstance(part, dict))
            if not isinstance(output, str):
                raise _invalid(f"{at}.output", "must be a string (or a list of text parts).")
            _check_length(f"{at}.output", len(output))
            messages.append(Message("tool", output, tool_call_id=call_id, name=names.get(call_id)))
        else:
            raise _invalid(f"{at}.type", f"item type {kind!r} is not supported here (message, function_call and "
                           "function_call_output are).")
    return messages


def _check_length(param: str, length: int) -> None:
    if length > MAX_MESSAGE_CHARS:
        raise _invalid(param, f"a message may be at most {MAX_MESSAGE_CHARS} characters (this one has {length}).",
                       code="message_too_long")


def _message(at: str, item: dict[str, Any]) -> Message:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise _invalid(f"{at}.role", "must be user, assistant, system or developer.")
    content = item.get("content", "")
    if isinstance(content, str):
        _check_length(f"{at}.content", len(content))
        return Message("system" if role == "developer" else role, content)
    if not isinstance(content, list):
        raise _invalid(f"{at}.content", "must be a string or a list of content parts.")
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
                raise _invalid(f"{where}.image_url", "an input_image needs image_url (file_id is not supported).")
            try:
                parts.append(ImagePart.from_data_url(url))
            except ValueError as exc:
                raise _invalid(f"{where}.image_url", f"{exc} Remote image URLs are not fetched; send a data URL."
                               ) from exc
        else:
            raise _invalid(f"{where}.type", "content parts are input_text (or output_text) with text, or "
                           "input_image with a data URL.")
    _check_length(f"{at}.content", sum(len(part.text) for part in parts if isinstance(part, TextPart)))
    return Message("system" if role == "developer" else role, parts)


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """Responses' tool_choice in the runtime's (OpenAI chat) vocabulary."""
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _invalid("tool_choice", 'must be "none", "auto", "required" or {"type": "function", "name": ...}.')


def _response_format(body: ResponseRequest) -> dict[str, Any] | None:
    fmt = body.text.format if body.text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if not fmt.name or fmt.schema_ is None:
        raise _invalid("text.format", "a json_schema format needs name and schema.")
    schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    if fmt.description:
        schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": schema}


# --- the run --------------------------------------------------------------------------------------

class ResponseRun(engine.Completion):
    """One /v1/responses request as an engine.Completion: the same model resolution, router, agent, workflows
    and metering; its own messages and ChatRequest. Raises AppError 400/404 before anything is sent."""

    field_names = {"response_format": "text.format", "reasoning_effort": "reasoning.effort", "logprobs": "include"}

    def __init__(self, body: ResponseRequest, history: list[dict[str, Any]], *, settings: AgentSettings,
                 user: AbstractBaseUser | None, caller: Caller, unknown: dict[str, Any] | None = None):
        self.spec = body
        self.rid = new_id("resp")
        self.created = int(time.time())
        self.items = input_items(body)
        self.history = history
        messages = to_messages(history, where="previous_response_id") if history else []
        messages += to_messages(self.items)
        if not messages:
            raise _invalid("input", "give at least one input item (or a previous_response_id).")
        if body.instructions:
            _check_length("instructions", len(body.instructions))
            messages.insert(0, Message("system", body.instructions))
        tools = [ToolSpec(tool.name, tool.description or "",
                          tool.parameters or {"type": "object", "properties": {}}) for tool in body.tools or []]
        self.tools = tools
        self.tool_choice = _tool_choice(body.tool_choice)
        self.response_format = _response_format(body)
        # What the engine's shared paths (the router, the agent, workflows) are given: this dialect's request.
        request = ChatRequest(messages=messages, tools=tools, tool_choice=self.tool_choice,
                              response_format=self.response_format, extra=chat_extra(body),
                              passthrough=dict(unknown or {}),
                              settings=ModelSettings(model=body.model, temperature=body.temperature,
                                                     max_tokens=body.max_output_tokens))
        # raises 400 naming a field (text.format, top_p, ...) the model's upstreams cannot carry
        super().__init__(None, settings=settings, user=user, caller=caller, request=request)
        if self.provider is None and self.tools:  # the agent or a workflow: they answer with their own tools
            raise _invalid("tools", f"the model {body.model!r} runs its own tools; send tools to a catalogue "
                           "model.")

    def response(self, *, status: str, output: list[dict[str, Any]], usage: Usage | None,
                 finish: str = "stop", error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object. A reply cut by max_output_tokens is `incomplete`, as OpenAI has it."""
        status, incomplete = _status(status, finish)
        return {**self._fixed, "status": status, "error": error, "incomplete_details": incomplete, "output": output,
                "usage": None if usage is None else usage_out(usage)}

    def response_json(self, *, status: str, output: list[bytes], usage: Usage | None) -> bytes:
        """json.dumps(self.response(status=status, output=..., usage=usage)) byte for byte, for a stream's
        opening and closing events, given the output items already encoded: the fields a run does not change
        are encoded once per run, a stream's items once each (tests/compat/test_chunk_bytes.py holds the
        bytes). `status` is the one _status gives (no error: a failed stream uses response())."""
        incomplete = b"null" if status != "incomplete" else b'{"reason": "max_output_tokens"}'
        return b"".join((self._fixed_head, b', "status": "', status.encode(), b'", "error": null, '
                         b'"incomplete_details": ', incomplete, b', "output": [', b", ".join(output), b'], "usage": ',
                         b"null" if usage is None else json.dumps(usage_out(usage)).encode(), b"}"))

    @cached_property
    def _fixed(self) -> dict[str, Any]:
        """The response object's fields that a run does not change (a stream sends the object three times)."""
        body = self.spec
        fmt = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text and body.text.format else {
            "type": "text"}
        return {
            "id": self.rid, "object": "response", "created_at": self.created, "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens, "model": self.model,
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id, "store": body.store, "temperature": body.temperature,
            "top_p": body.top_p, "text": {"format": fmt}, "tool_choice": body.tool_choice or "auto",
            "tools": [tool.model_dump(exclude_none=True) for tool in body.tools or []],
            "truncation": "disabled", "metadata": body.metadata or {}, "user": body.user,
        }

    @cached_property
    def _fixed_head(self) -> bytes:
        """The fixed fields encoded, as the start of a response object (`{...` without its closing brace):
        json.dumps(self._fixed) byte for byte (tests/compat/test_chunk_bytes.py holds it over requests that set
        each field), from a template; encoding the dict cost a stream ~5-10 us. A field a request leaves unset
        is a constant; one it sets is encoded alone."""
        body = self.spec
        fmt = body.text.format if body.text else None
        return _FIXED_HEAD % (
            self.rid.encode(), self.created, _json_or_null(body.instructions), _json_or_null(body.max_output_tokens),
            json_text(self.model), b"false" if body.parallel_tool_calls is False else b"true",
            _json_or_null(body.previous_response_id), b"true" if body.store else b"false",
            _json_or_null(body.temperature), _json_or_null(body.top_p),
            json.dumps(self._fixed["text"]).encode() if fmt is not None else b'{"format": {"type": "text"}}',
            _json_or_null(body.tool_choice) if body.tool_choice else b'"auto"',
            json.dumps(self._fixed["tools"]).encode() if body.tools else b"[]",
            json.dumps(body.metadata).encode() if body.metadata else b"{}", _json_or_null(body.user))

    async def store(self, response: dict[str, Any]) -> None:
        if not self.spec.store:
            return
        from compat.models import StoredResponse

        history = [*self.history, *self.items, *response["output"]]
        owner = self.user if getattr(self.user, "pk", None) is not None else None

        def save() -> None:
            StoredResponse.objects.create(id=self.rid, owner=owner, history=history, response=response,
                                          previous=self.spec.previous_response_id or "",
                                          instructions=self.spec.instructions or "")

        await db(save)

    async def events(self, problem: Problem | None = None) -> AsyncIterator[bytes]:
        """The typed SSE events, opened (engine.Completion.opened: a failure to answer is raised here as the
        AppError, a proper HTTP error). A hang-up closes this and, with it, the upstream. `problem` (the caller's
        credential check) is awaited before each event: once it answers an AppError the upstream is closed and
        the stream ends with `response.failed` carrying it, as any failure of a started response does."""
        first, batches = await self.opened()
        return _events(self, first, batches, problem)


# The response object's fixed fields, in _fixed's order: what json.dumps(run._fixed) gives without its closing brace.
_FIXED_HEAD = (b'{"id": "%s", "object": "response", "created_at": %d, "instructions": %s, "max_output_tokens": %s, '
               b'"model": %s, "parallel_tool_calls": %s, "previous_response_id": %s, "store": %s, '
               b'"temperature": %s, "top_p": %s, "text": %s, "tool_choice": %s, "tools": %s, '
               b'"truncation": "disabled", "metadata": %s, "user": %s')


def _json_or_null(value: Any) -> bytes:
    return b"null" if value is None else json.dumps(value).encode()


def _status(status: str, finish: str) -> tuple[str, dict[str, Any] | None]:
    """(status, incomplete_details): a completed reply cut by max_output_tokens is `incomplete`."""
    if status == "completed" and finish in ("length", "max_rounds"):
        return "incomplete", {"reason": "max_output_tokens"}
    return status, None


def usage_out(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {"input_tokens": usage.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                           "output_tokens": usage.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                           "total_tokens": usage.total_tokens}
    if usage.estimated:
        out["estimated"] = True
    return out


def message_item(item_id: str, text: str, status: str = "completed",
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}] \
        if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(call: ToolCall, arguments: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call.id}", "call_id": call.id, "name": call.name,
            "arguments": call.arguments_text if arguments is None else arguments, "status": status}


def output_items(reply: Completion) -> list[dict[str, Any]]:
    items = [message_item(item_id(), reply.text, logprobs=reply.logprobs)] if reply.text or not reply.tool_calls \
        else []
    return items + [call_item(call) for call in reply.tool_calls]


def _delta_template(item_id: str, index: int) -> bytes:
    """A response.output_text.delta event of this item as a %-template: `template % (JSON text, number)` is
    byte for byte what emit("response.output_text.delta", ...) gives, without building and encoding it (the
    item id is `msg_` and hex digits, the index a number: neither needs escaping; tests/compat hold the bytes)."""
    return (b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "item_id": "%s", '
            b'"output_index": %d, "content_index": 0, "delta": %%s, "logprobs": [], "sequence_number": %%d}\n\n'
            % (item_id.encode(), index))


def _wrapped(kind: str, name: str, value: bytes, sequence: int) -> bytes:
    """sse_event({"type": kind, name: value, "sequence_number": sequence}, kind) for a value already encoded
    (`json.dumps(value)`): the created and in_progress events carry the same response object, encoded once."""
    return b'event: %s\ndata: {"type": "%s", "%s": %s, "sequence_number": %d}\n\n' % (
        kind.encode(), kind.encode(), name.encode(), value, sequence)


# The events that open a message item and those that close it, as %-templates (item id, output index, sequence
# number; closing: the whole text's JSON, the part and the item already encoded): the whole text is encoded once,
# not four times (the three closing events and the response object that ends the stream).
_ITEM_ADDED = (b'event: response.output_item.added\ndata: {"type": "response.output_item.added", "output_index": %d, '
               b'"item": {"type": "message", "id": "%s", "status": "in_progress", "role": "assistant", "content": []}, '
               b'"sequence_number": %d}\n\n')
_PART_ADDED = (b'event: response.content_part.added\ndata: {"type": "response.content_part.added", "item_id": "%s", '
               b'"output_index": %d, "content_index": 0, "part": {"type": "output_text", "text": "", '
               b'"annotations": [], "logprobs": []}, "sequence_number": %d}\n\n')
_TEXT_DONE = (b'event: response.output_text.done\ndata: {"type": "response.output_text.done", "item_id": "%s", '
              b'"output_index": %d, "content_index": 0, "text": %s, "logprobs": %s, "sequence_number": %d}\n\n')
_PART_DONE = (b'event: response.content_part.done\ndata: {"type": "response.content_part.done", "item_id": "%s", '
              b'"output_index": %d, "content_index": 0, "part": %s, "sequence_number": %d}\n\n')
_ITEM_DONE = (b'event: response.output_item.done\ndata: {"type": "response.output_item.done", "output_index": %d, '
              b'"item": %s, "sequence_number": %d}\n\n')


async def _events(run: ResponseRun, first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]],
                  problem: Problem | None = None) -> AsyncIterator[bytes]:
    sequence = 0
    out: list[bytes] = []
    output: list[dict[str, Any]] = []  # the response's items, and each encoded (the closing event's bytes)
    encoded: list[bytes] = []
    usage = Usage()
    finish = "stop"
    text: list[str] = []
    logprobs: list[dict[str, Any]] = []  # the open message's, when the upstream sends them
    open_message: dict[str, Any] | None = None

    def emit(kind: str, **fields: Any) -> None:
        nonlocal sequence
        out.append(sse_event({"type": kind, **fields, "sequence_number": sequence}, kind))
        sequence += 1

    delta_template: bytes | None = None  # the open message's

    def close_message() -> None:
        nonlocal open_message, delta_template, sequence
        if open_message is None:
            return
        index, item_id, whole = len(output), open_message["id"], "".join(text)
        whole_json, raw_id = json_text(whole), item_id.encode()
        probs = json.dumps(logprobs).encode() if logprobs else b"[]"
        part = b'{"type": "output_text", "text": %s, "annotations": [], "logprobs": %s}' % (whole_json, probs)
        item = (b'{"type": "message", "id": "%s", "status": "completed", "role": "assistant", "content": [%s]}'
                % (raw_id, part))
        out.extend((_TEXT_DONE % (raw_id, index, whole_json, probs, sequence),
                    _PART_DONE % (raw_id, index, part, sequence + 1), _ITEM_DONE % (index, item, sequence + 2)))
        sequence += 3
        output.append(message_item(item_id, whole, logprobs=list(logprobs)))
        encoded.append(item)
        open_message = delta_template = None
        text.clear()
        logprobs.clear()

    def render(batch: list[StreamEvent]) -> None:
        nonlocal usage, finish, open_message, delta_template, sequence
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                if open_message is None:
                    open_message = message_item(item_id(), "", status="in_progress")
                    raw_id, index = open_message["id"].encode(), len(output)
                    out.extend((_ITEM_ADDED % (index, raw_id, sequence), _PART_ADDED % (raw_id, index, sequence + 1)))
                    sequence += 2
                    # Most of a stream's events: one template per message item (its id and index are fixed).
                    delta_template = _delta_template(open_message["id"], index)
                text.append(event.text)
                if event.logprobs is None:
                    out.append(delta_template % (json_text(event.text), sequence))  # type: ignore[operator]
                    sequence += 1
                else:  # the upstream's log probabilities of these tokens, relayed
                    logprobs.extend(event.logprobs)
                    emit("response.output_text.delta", item_id=open_message["id"], output_index=len(output),
                         content_index=0, delta=event.text, logprobs=event.logprobs)
            elif isinstance(event, ToolCallEvent):
                close_message()
                index, arguments = len(output), event.call.arguments_text
                item = call_item(event.call)
                emit("response.output_item.added", output_index=index,
                     item=call_item(event.call, arguments="", status="in_progress"))
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                     delta=arguments)
                emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                     name=event.call.name, arguments=arguments)
                emit("response.output_item.done", output_index=index, item=item)
                output.append(item)
                encoded.append(json.dumps(item).encode())
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, Finish):
                finish = event.reason

    opening = run.response_json(status="in_progress", output=[], usage=None)
    out += [_wrapped("response.created", "response", opening, 0), _wrapped("response.in_progress", "response",
                                                                           opening, 1)]
    sequence = 2
    try:
        async with aclosing(batches):
            render(first)
            await _stands(problem)
            yield b"".join(out)
            out.clear()
            async for batch in batches:
                await _stands(problem)
                # Most batches are one text delta of the open message (a model streams a token per read): its
                # template, without render's dispatch and the join (render gives the same bytes).
                if delta_template is not None and len(batch) == 1:
                    event = batch[0]
                    if type(event) is TextDelta and event.text and event.logprobs is None:
                        text.append(event.text)
                        yield delta_template % (json_text(event.text), sequence)
                        sequence += 1
                        continue
                render(batch)
                if out:
                    yield b"".join(out)
                    out.clear()
        close_message()
        status = _status("completed", finish)[0]
        if run.spec.store:
            await run.store(run.response(status="completed", output=output, usage=usage, finish=finish))
    except AppError as exc:
        emit("response.failed", response=run.response(status="failed", output=output, usage=None,
                                                      error={"code": exc.code, "message": exc.message}))
        yield b"".join(out)
        return
    except Exception:  # a boundary: never a hanging or broken stream
        logger.exception("The /v1/responses stream failed")
        emit("response.failed", response=run.response(status="failed", output=output, usage=None, error={
            "code": "internal_error", "message": "The server failed; the error was logged."}))
        yield b"".join(out)
        return
    kind = "response.completed" if status == "completed" else "response.incomplete"
    out.append(_wrapped(kind, "response", run.response_json(status=status, output=encoded, usage=usage), sequence))
    yield b"".join(out)


async def _stands(problem: Problem | None) -> None:
    failed = await problem() if problem is not None else None
    if failed is not None:
        raise failed


# --- the views ------------------------------------------------------------------------------------

# What `new_id("resp")` makes: anything else names no stored response, and is answered without a query (a NUL
# would otherwise reach PostgreSQL, which refuses it in a string literal).
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")


def _owned(user: AbstractBaseUser | None, response_id: str) -> QuerySet[StoredResponse]:
    """The caller's stored response of that id, as a query (empty for an id `new_id` cannot have made)."""
    from compat.models import StoredResponse  # noqa: F811 (the model at run time; TYPE_CHECKING names it too)

    user_id = getattr(user, "pk", None)
    objects = StoredResponse.objects
    if RESPONSE_ID.fullmatch(response_id) is None:
        return objects.none()
    mine = objects.filter(owner_id=user_id) if user_id is not None else objects.filter(owner__isnull=True)
    return mine.filter(id=response_id)


def _not_found(response_id: str) -> AppError:
    return AppError("not_found", "No stored response of that id (or not yours).", 404)


async def _history(user: AbstractBaseUser | None, response_id: str) -> list[dict[str, Any]]:
    stored = await db(lambda: _owned(user, response_id).values_list("history", flat=True).first())
    if stored is None:
        raise AppError("not_found", "previous_response_id: no stored response of that id (or not yours).",
                       404, {"previous_response_id": ["not found"]})
    return stored


async def create(request: HttpRequest) -> HttpResponse:
    from accounts.authentication import credential_problem
    from compat.api import _caller

    user, credential = await _caller(request)
    body, unknown = parse_request(request)
    history = await _history(user, body.previous_response_id) if body.previous_response_id else []
    caller = Caller.with_key(getattr(user, "pk", None), getattr(request, "api_key", None), "v1")
    run = ResponseRun(body, history, settings=await aget_settings(), user=user, caller=caller, unknown=unknown)
    if body.stream:
        # The stream ends at its next event, with response.failed, once the token or key is revoked.
        stands = (lambda: credential_problem(credential)) if credential is not None else None
        response: HttpResponse = sse_response(await run.events(stands))
    else:
        reply = await run.reply()
        items = output_items(reply)
        if body.store:
            await run.store(run.response(status="completed", output=items, usage=reply.usage,
                                         finish=reply.finish_reason))
        # The bytes JsonResponse(run.response(...)) would send, from the run's encoded fixed fields.
        response = HttpResponse(run.response_json(status=_status("completed", reply.finish_reason)[0],
                                                  output=[json.dumps(item).encode() for item in items],
                                                  usage=reply.usage), content_type="application/json")
    for name, value in run.headers().items():
        response[name] = value
    return response


async def one(request: HttpRequest, pk: str) -> HttpResponse:
    response_id = pk
    from compat.api import _caller

    user, _ = await _caller(request)
    if request.method == "DELETE":
        deleted = await db(lambda: _owned(user, response_id).delete()[0])
        if not deleted:
            raise _not_found(response_id)
        return JsonResponse({"id": response_id, "object": "response.deleted", "deleted": True})
    stored = await db(lambda: _owned(user, response_id).values_list("response", flat=True).first())
    if stored is None:
        raise _not_found(response_id)
    return JsonResponse(stored)


async def input_items_list(request: HttpRequest, pk: str) -> HttpResponse:
    """GET /v1/responses/{id}/input_items: the items the stored response answered (its conversation before its
    output), OpenAI's list page: `order` (`desc`, the default, or `asc`), `limit` (1-100, default 20), `after`
    (an item id). An item without an id of its own (a client's input message) gets `item_<position>`."""
    from compat.api import _caller

    user, _ = await _caller(request)
    stored = await db(lambda: _owned(user, pk).values_list("history", "response").first())
    if stored is None:
        raise _not_found(pk)
    history, response = stored
    items = [_input_item(item, index) for index, item in enumerate(history[:len(history) - len(response["output"])])]
    order, limit, after = _page_params(request)
    if order == "desc":
        items.reverse()
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise AppError("invalid_value", f"after: no input item {after!r} in this response.", 400,
                           {"after": ["not found"]})
        items = items[ids.index(after) + 1:]
    page = items[:limit]
    return JsonResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                         "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})


def _page_params(request: HttpRequest) -> tuple[str, int, str]:
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise AppError("invalid_value", "order: asc or desc.", 400, {"order": ["asc or desc"]})
    raw = request.GET.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise AppError("invalid_value", "limit: an integer from 1 to 100.", 400, {"limit": ["1 to 100"]})
    return order, int(raw), request.GET.get("after", "")


def _input_item(item: dict[str, Any], index: int) -> dict[str, Any]:
    """A stored item in the list's shape: an id, and a message's string content as one text part."""
    out = {"id": f"item_{index:04d}", **item} if not item.get("id") else dict(item)
    if out.get("type", "message") == "message":
        out["type"] = "message"
        if isinstance(out.get("content"), str):
            kind = "output_text" if out.get("role") == "assistant" else "input_text"
            out["content"] = [{"type": kind, "text": out["content"]}]
    return out
