"""The Anthropic `/v1/messages` wire format: its streaming events and `tool_use` / `tool_result` blocks."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from pydantic import BaseModel, ValidationError

from agentsite.agent.multimodal import anthropic_content
from agentsite.agent.providers.base import Provider, flatten
from agentsite.agent.providers.http import Upstream, events_by_read, get_json, model_ids, post_json, stream_sse_batches
from agentsite.agent.providers.urls import join_url
from agentsite.agent.types import (
    ChatRequest,
    Completion,
    Finish,
    Message,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)

logger = logging.getLogger(__name__)

API_VERSION = "2023-06-01"
# Anthropic requires max_tokens; this applies when the settings leave it unset.
DEFAULT_MAX_TOKENS = 1024

STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
                "tool_use": "tool_calls", "refusal": "content_filter"}


# --- the reply's wire shapes (fields we do not use are ignored) ---

class _Block(BaseModel):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None


class _Delta(BaseModel):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None


class _Usage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    def prompt_tokens(self) -> int:
        return (self.input_tokens or 0) + (self.cache_creation_input_tokens or 0) + (self.cache_read_input_tokens or 0)


class _Message(BaseModel):
    content: list[_Block] = []
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: _Usage | None = None


class _Event(BaseModel):
    type: str
    index: int | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    message: _Message | None = None
    usage: _Usage | None = None
    error: dict[str, Any] | None = None


# --- the provider ---

class AnthropicProvider(Provider):
    name = "anthropic"
    label = "Anthropic"
    # The others have their Anthropic form (wire_extra); `n: 1` every provider carries.
    carries = frozenset({"top_p", "top_k", "user", "parallel_tool_calls"})

    @classmethod
    def carries_response_format(cls, request: ChatRequest | None = None) -> bool:
        # As a tool the model is made to call: only for a request without tools of its own.
        return request is None or not request.tools
    default_model = "claude-sonnet-4-5"
    default_base_url = "https://api.anthropic.com"

    def _upstream(self, path: str = "v1/messages") -> Upstream:
        headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION, **self.auth_headers()}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        headers.update(self._headers)
        # Accept a base URL given with or without its /v1, as people copy either from the docs.
        return Upstream(self.name, join_url(self.base_url, path, drop_suffix="/v1"), headers, self._api_key,
                        self.timeout, secrets=self.secrets())

    async def list_models(self) -> list[str]:
        upstream = self._upstream("v1/models")
        return model_ids(upstream, await get_json(upstream))

    def wire_request(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        system, messages = wire_messages(request.messages)
        options = request.settings
        body: dict[str, Any] = {**request.passthrough, "model": self.model_for(request), "messages": messages,
                                "max_tokens": options.max_tokens or DEFAULT_MAX_TOKENS, "stream": stream}
        if system:
            body["system"] = system
        if options.temperature is not None:
            body["temperature"] = min(options.temperature, 1.0)  # Anthropic's range is 0-1, OpenAI's 0-2
        if options.stop:
            body["stop_sequences"] = options.stop
        if request.tools:
            body["tools"] = [{"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
                             for tool in request.tools]
        choice = wire_tool_choice(request.tool_choice)
        if choice is not None:
            body["tool_choice"] = choice
        body.update(wire_extra(request.extra, choice))
        if request.response_format is not None:  # JSON mode as a tool the model must call: its input is the reply
            body["tools"] = [json_tool(request.response_format)]
            body["tool_choice"] = {**body.get("tool_choice", {}), "type": "tool", "name": JSON_TOOL}
        return body

    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        return flatten(self.stream_batches(request))

    async def stream_batches(self, request: ChatRequest) -> AsyncGenerator[list[StreamEvent], None]:
        upstream = self._upstream()
        state = _StreamState(upstream, json_mode=request.response_format is not None)
        async with aclosing(stream_sse_batches(upstream, self.wire_request(request, stream=True))) as reads:
            async for events in events_by_read(reads, lambda sse: state.feed(sse.data)):
                yield events
        yield state.finish()

    async def complete(self, request: ChatRequest) -> Completion:
        upstream = self._upstream()
        data = await post_json(upstream, self.wire_request(request, stream=False))
        try:
            reply = _Message.model_validate(data)
        except ValidationError as exc:
            raise upstream.error(f"the reply did not have the message shape: {exc.errors()[0]['msg']}") from None
        text = "".join(block.text or "" for block in reply.content if block.type == "text")
        calls = [ToolCall(block.id or "", block.name or "", block.input or {})
                 for block in reply.content if block.type == "tool_use"]
        if request.response_format is not None:  # the JSON tool's input is the reply's text
            text += "".join(json.dumps(call.arguments) for call in calls if call.name == JSON_TOOL)
            calls = [call for call in calls if call.name != JSON_TOOL]
            if reply.stop_reason == "tool_use" and not calls:
                reply.stop_reason = "end_turn"
        usage = Usage(reply.usage.prompt_tokens(), reply.usage.output_tokens or 0) if reply.usage else Usage()
        return Completion(text, calls, usage, _finish_reason(reply.stop_reason, calls),
                          _stop_sequence(reply.stop_reason, reply.stop_sequence))


class _StreamState:
    """Folds Anthropic's events into ours: a tool_use block becomes one ToolCallEvent when it stops."""

    def __init__(self, upstream: Upstream, *, json_mode: bool = False):
        self.upstream = upstream
        self.json_mode = json_mode  # the JSON tool's input is text of the reply (json_tool)
        self.tool_blocks: dict[int, dict[str, Any]] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.stopped = False
        self.called = False

    def feed(self, data: str) -> list[StreamEvent]:
        try:
            event = _Event.model_validate_json(data)
        except ValidationError as exc:
            raise self.upstream.error(f"the stream was malformed: {exc.errors()[0]['msg']} in {data[:120]!r}") from None
        handler = getattr(self, f"_on_{event.type}", None)
        return (handler(event) or []) if handler else []  # unknown event types (ping, new kinds) are skipped

    def _on_error(self, event: _Event) -> None:
        raise self.upstream.error(str((event.error or {}).get("message") or event.error))

    def _on_message_start(self, event: _Event) -> None:
        if event.message and event.message.usage:
            self.prompt_tokens = event.message.usage.prompt_tokens()
            self.completion_tokens = event.message.usage.output_tokens or 0

    def _on_content_block_start(self, event: _Event) -> list[StreamEvent]:
        block = event.content_block
        if block is None or event.index is None:
            raise self.upstream.error("the stream sent a content block without an index.")
        if block.type == "tool_use":
            self.tool_blocks[event.index] = {"id": block.id or "", "name": block.name or "", "json": []}
        elif block.type == "text" and block.text:
            return [TextDelta(block.text)]
        return []

    def _on_content_block_delta(self, event: _Event) -> list[StreamEvent]:
        delta = event.delta
        if delta is None:
            return []
        if delta.type == "text_delta" and delta.text:
            return [TextDelta(delta.text)]
        if delta.type == "input_json_delta" and event.index in self.tool_blocks:
            self.tool_blocks[event.index]["json"].append(delta.partial_json or "")
        return []  # thinking and signature deltas are not part of the reply

    def _on_content_block_stop(self, event: _Event) -> list[StreamEvent]:
        block = self.tool_blocks.pop(event.index, None) if event.index is not None else None
        if block is None:
            return []
        if self.json_mode and block["name"] == JSON_TOOL:
            return [TextDelta("".join(block["json"]))]
        self.called = True
        return [ToolCallEvent(ToolCall.parsed(block["id"], block["name"], "".join(block["json"])))]

    def _on_message_delta(self, event: _Event) -> None:
        if event.delta and event.delta.stop_reason:
            self.stop_reason = event.delta.stop_reason
            self.stop_sequence = event.delta.stop_sequence
        if event.usage and event.usage.output_tokens is not None:
            self.completion_tokens = event.usage.output_tokens  # cumulative, not an increment

    def _on_message_stop(self, event: _Event) -> None:
        self.stopped = True

    def finish(self) -> list[StreamEvent]:
        if not self.stopped:
            raise self.upstream.error("the stream ended before the reply was complete.")
        usage = Usage(self.prompt_tokens, self.completion_tokens)
        if self.json_mode and self.stop_reason == "tool_use" and not self.called:
            self.stop_reason = "end_turn"
        return [usage, Finish(_finish_reason(self.stop_reason, [None] if self.called else []),
                              _stop_sequence(self.stop_reason, self.stop_sequence))]


def _finish_reason(stop_reason: str | None, calls: list[Any]) -> str:
    if stop_reason is None:
        return "tool_calls" if calls else "stop"
    return STOP_REASONS.get(stop_reason, stop_reason)


def _stop_sequence(stop_reason: str | None, stop_sequence: str | None) -> str | None:
    """The sequence the reply stopped on: Anthropic names it with stop_reason "stop_sequence" (null otherwise)."""
    return stop_sequence if stop_reason == "stop_sequence" and isinstance(stop_sequence, str) else None


JSON_TOOL = "json_reply"


def json_tool(response_format: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's response_format (json_object, json_schema) as the one tool an Anthropic model is made to call:
    Anthropic has no JSON mode, and a forced tool's input is JSON of its schema (a json_object: any object)."""
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema") or {"type": "object"}
    about = f" ({spec['name']}: {spec.get('description', '')})" if spec.get("name") else ""
    return {"name": JSON_TOOL, "description": f"Give your whole reply as this tool's input{about}.",
            "input_schema": schema}


def wire_extra(extra: dict[str, Any], tool_choice: dict[str, Any] | None) -> dict[str, Any]:
    """The request's extra fields that Anthropic carries (AnthropicProvider.carries), in its terms: top_p and
    top_k as they are, OpenAI's `user` as `metadata.user_id`, `parallel_tool_calls: false` as the tool choice's
    `disable_parallel_tool_use` (which needs a tool choice: `auto` when the request named none)."""
    out: dict[str, Any] = {key: extra[key] for key in ("top_p", "top_k") if extra.get(key) is not None}
    if extra.get("user") is not None:
        out["metadata"] = {"user_id": extra["user"]}
    if extra.get("parallel_tool_calls") is False:
        out["tool_choice"] = {**(tool_choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    return out


def wire_tool_choice(choice: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """OpenAI's tool_choice vocabulary (see types.py) in Anthropic's; Anthropic's own dicts pass through."""
    if choice is None:
        return None
    if isinstance(choice, str):
        return {"type": {"required": "any"}.get(choice, choice)}
    if choice.get("type") == "function":
        return {"type": "tool", "name": (choice.get("function") or {}).get("name", "")}
    return choice


# --- provider-neutral messages to the wire ---

def wire_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Anthropic's top-level system text and its messages, which must alternate user / assistant: a run of
    tool results (and a user turn right after them) goes into one user message.
    """
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.text)
            continue
        role, blocks = _wire_blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    if wire and wire[0]["role"] != "user":  # the API requires the first turn to be the user's
        wire.insert(0, {"role": "user", "content": [{"type": "text", "text": "(the conversation continues)"}]})
    return "\n\n".join(text for text in system if text), wire


def _wire_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        content = anthropic_content(message.parts) or [{"type": "text", "text": "(no output)"}]
        return "user", [{"type": "tool_result", "tool_use_id": message.tool_call_id or "", "content": content,
                         "is_error": message.is_error}]
    blocks = anthropic_content(message.parts)
    if message.role == "assistant":
        blocks += [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                   for call in message.tool_calls]
        return "assistant", blocks
    return "user", blocks
