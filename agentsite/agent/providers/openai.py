"""The OpenAI `/chat/completions` wire format, for any compatible base URL (OpenAI, Ollama, vLLM, llama.cpp)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from pydantic import BaseModel, ValidationError

from agentsite.agent.multimodal import openai_content, openai_image
from agentsite.agent.providers.base import Provider, flatten
from agentsite.agent.providers.http import (
    SseEvent,
    Upstream,
    events_by_read,
    get_json,
    model_ids,
    post_json,
    stream_sse_batches,
)
from agentsite.agent.providers.urls import join_url
from agentsite.agent.types import (
    ChatRequest,
    Completion,
    Finish,
    ImagePart,
    Message,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
)

logger = logging.getLogger(__name__)


# --- the reply's wire shapes (fields we do not use are ignored) ---

class _FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(BaseModel):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _ChunkChoice(BaseModel):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # vLLM's: the stop string (or token id) that ended the reply
    logprobs: dict[str, Any] | None = None


class _Usage(BaseModel):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0


class _Chunk(BaseModel):
    choices: list[_ChunkChoice] = []
    usage: _Usage | None = None
    error: dict[str, Any] | str | None = None


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _ReplyMessage(BaseModel):
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    message: _ReplyMessage
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # as _ChunkChoice's
    logprobs: dict[str, Any] | None = None


class _Completion(BaseModel):
    choices: list[_Choice]
    usage: _Usage | None = None


# --- the provider ---

class OpenAIProvider(Provider):
    name = "openai"
    label = "OpenAI-compatible (OpenAI, Ollama, vLLM...)"
    default_model = "gpt-4o-mini"
    default_base_url = "https://api.openai.com/v1"
    carries = None  # the extra fields are OpenAI's own vocabulary: all go as they came

    @classmethod
    def carries_response_format(cls, request: ChatRequest | None = None) -> bool:
        return True  # as it is

    def _upstream(self, path: str = "chat/completions") -> Upstream:
        headers = {"Content-Type": "application/json", **self.auth_headers()}
        if self._api_key:  # local servers (Ollama, llama.cpp) need none
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self._headers)
        return Upstream(self.name, join_url(self.base_url, path), headers, self._api_key, self.timeout,
                        secrets=self.secrets())

    async def list_models(self) -> list[str]:
        upstream = self._upstream("models")
        return model_ids(upstream, await get_json(upstream))

    def wire_request(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        # The client's extra fields first: the ones this request is built from (model, messages, stream) win.
        body: dict[str, Any] = {**request.passthrough, **request.extra, "model": self.model_for(request),
                                "messages": wire_messages(request.messages), "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        options = request.settings
        for key, value in (("temperature", options.temperature), ("max_tokens", options.max_tokens),
                           ("stop", options.stop)):
            if value is not None:
                body[key] = value
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                               "parameters": tool.input_schema}}
                             for tool in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = request.tool_choice
        if request.response_format is not None:
            body["response_format"] = request.response_format
        return body

    def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        return flatten(self.stream_batches(request))

    async def stream_batches(self, request: ChatRequest) -> AsyncGenerator[list[StreamEvent], None]:
        upstream = self._upstream()
        state = _StreamState(upstream, request)
        async with aclosing(stream_sse_batches(upstream, self.wire_request(request, stream=True))) as reads:
            async for events in events_by_read(reads, state.feed_sse):
                yield events
        yield state.finish()  # never empty: it ends with the Finish

    async def complete(self, request: ChatRequest) -> Completion:
        upstream = self._upstream()
        data = await post_json(upstream, self.wire_request(request, stream=False))
        try:
            reply = _Completion.model_validate(data)
        except ValidationError as exc:
            raise upstream.error(f"the reply did not have the chat completion shape: {_first_error(exc)}") from None
        if not reply.choices:
            raise upstream.error("the reply had no choices.")
        choice = reply.choices[0]
        calls = [_parse_call(call.id, call.function.name, call.function.arguments)
                 for call in choice.message.tool_calls or []]
        usage = Usage(reply.usage.prompt_tokens or 0, reply.usage.completion_tokens or 0) if reply.usage else Usage()
        reason = choice.finish_reason or ("tool_calls" if calls else "stop")
        return Completion(_reply_text(choice.message.content), calls, usage, reason,
                          _stop_sequence(reason, choice.stop_reason, request), _logprobs(choice.logprobs))


class _StreamState:
    """Folds chunks into events; tool-call argument fragments are joined per `index` until the call is complete."""

    def __init__(self, upstream: Upstream, request: ChatRequest | None = None):
        self.upstream = upstream
        self.request = request
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.done = False

    def feed_sse(self, sse: SseEvent) -> list[StreamEvent]:
        # Read on past [DONE] to the end of the body, so the connection can go back to the pool.
        if self.done or sse.data.strip() == "[DONE]":
            self.done = True
            return []
        return self.feed(sse.data)

    def feed(self, data: str) -> list[StreamEvent]:
        text = _plain_text(data)
        if text is not None:
            return [TextDelta(text)] if text else []
        try:
            chunk = _Chunk.model_validate_json(data)
        except ValidationError as exc:
            raise self.upstream.error(f"the stream was malformed: {_first_error(exc)} in {data[:120]!r}") from None
        if chunk.error:
            raise self.upstream.error(_chunk_error(chunk.error))
        if chunk.usage and (chunk.usage.prompt_tokens or chunk.usage.completion_tokens):
            self.usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
        events: list[StreamEvent] = []
        for choice in chunk.choices[:1]:  # n=1: one choice is all we ask for
            delta = choice.delta
            if delta and delta.content:
                events.append(TextDelta(delta.content, _logprobs(choice.logprobs)))
            for position, part in enumerate((delta.tool_calls or []) if delta else []):
                self._add_call_part(part, position)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
                self.stop_reason = choice.stop_reason
        return events

    def _add_call_part(self, part: _ToolCallDelta, position: int) -> None:
        # Some servers (older Ollama) send whole calls without an index: their position stands in for it.
        index = part.index if part.index is not None else position
        call = self.calls.setdefault(index, {"id": None, "name": None, "arguments": []})
        if part.id and not call["id"]:
            call["id"] = part.id
        if part.function:
            if part.function.name and not call["name"]:
                call["name"] = part.function.name
            if part.function.arguments:
                call["arguments"].append(part.function.arguments)

    def finish(self) -> list[StreamEvent]:
        if not self.done and self.finish_reason is None:
            raise self.upstream.error("the stream ended before the reply was complete.")
        events: list[StreamEvent] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            if not call["name"]:
                raise self.upstream.error(f"the stream sent a tool call (index {index}) without a name.")
            events.append(ToolCallEvent(_parse_call(call["id"], call["name"], "".join(call["arguments"]))))
        if self.usage:
            events.append(self.usage)
        reason = self.finish_reason or ("tool_calls" if self.calls else "stop")
        events.append(Finish(reason, _stop_sequence(reason, self.stop_reason, self.request)))
        return events


def _stop_sequence(finish_reason: str, stop_reason: str | int | None, request: ChatRequest | None) -> str | None:
    """The request's stop sequence the reply ended on, when the server says which: OpenAI's own API does not
    (`finish_reason: "stop"` is the model's end and a stop sequence alike); vLLM adds `stop_reason`, the
    string (or, for a stop token, its id). Only a string the request asked to stop on counts."""
    if finish_reason != "stop" or not isinstance(stop_reason, str) or request is None:
        return None
    return stop_reason if stop_reason in (request.settings.stop or ()) else None


def _plain_text(data: str) -> str | None:
    """The text of the commonest chunk, read without building models: one choice (index an int) whose delta
    holds string content and no tool calls, no finish reason, no usage, no error. None for any other chunk,
    which _Chunk validates in full (the answer is the same either way; this is only faster)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return None
    if type(chunk) is not dict or chunk.get("usage") is not None or chunk.get("error") is not None:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None or type(choice.get("index", 0)) is not int:
        return None
    if choice.get("logprobs") is not None:  # relayed with the text: _Chunk reads them
        return None
    delta = choice.get("delta")
    if type(delta) is not dict or delta.get("tool_calls") is not None:
        return None
    content = delta.get("content")
    return content if type(content) is str else None


def _logprobs(logprobs: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The `content` entries of a choice's logprobs (one per token), or None when the upstream sent none."""
    content = (logprobs or {}).get("content")
    return content if isinstance(content, list) and content else None


def _parse_call(call_id: str | None, name: str, arguments: str | dict[str, Any] | None) -> ToolCall:
    return ToolCall.parsed(call_id or f"call_{uuid.uuid4().hex[:24]}", name, arguments)


def _reply_text(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    return content or ""


def _chunk_error(error: dict[str, Any] | str) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return error


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    return f"{first.get('msg', 'invalid')}{f' at {where}' if where else ''}"


# --- provider-neutral messages to the wire ---

def wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """OpenAI messages. Tool results may carry images, which a `tool` message cannot: they follow the run of
    tool messages as one user message, since nothing may come between an assistant's tool calls and their results.
    """
    wire: list[dict[str, Any]] = []
    held_images: list[dict[str, Any]] = []
    for message in messages:
        if message.role != "tool" and held_images:
            wire.append({"role": "user", "content": held_images})
            held_images = []
        if message.role == "tool":
            wire.append(_tool_message(message))
            held_images.extend(_tool_images(message))
        elif message.role == "assistant":
            wire.append(_assistant_message(message))
        elif message.role == "system":
            wire.append({"role": "system", "content": message.text})
        else:
            wire.append({"role": "user", "content": openai_content(message.parts)})
    if held_images:
        wire.append({"role": "user", "content": held_images})
    return wire


def _tool_message(message: Message) -> dict[str, Any]:
    text = message.text or ("(image)" if message.images else "(no output)")
    if message.is_error:
        text = f"[tool error] {text}"
    return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": text}


def _tool_images(message: Message) -> list[dict[str, Any]]:
    images: list[ImagePart] = message.images
    if not images:
        return []
    label = f"The image(s) returned by the tool {message.name or ''} (call {message.tool_call_id}):"
    return [{"type": "text", "text": label}] + [openai_image(image) for image in images]


def _assistant_message(message: Message) -> dict[str, Any]:
    # The content as the client sent it: `""` stays `""` (llama.cpp refuses null next to tool calls), null stays null.
    wire: dict[str, Any] = {"role": "assistant", "content": None if message.null_content else message.text}
    if message.tool_calls:
        wire["tool_calls"] = [{"id": call.id, "type": "function",
                               "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
                              for call in message.tool_calls]
    return wire
