"""The Messages door's replies: the runtime's reply as a message object, and its stream as Anthropic's typed
events `message_start` ... `message_stop` (a Renderer for compat.stream); errors in Anthropic's shape."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from django.http import JsonResponse

from agentsite.agent.types import Finish, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from agentsite.core.errors import AppError, anthropic_envelope
from agentsite.core.sse import json_text, sse_event
from compat.stream import Renderer, drive

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


class MessageRenderer(Renderer):
    """Anthropic's stream: a text block stays open until a tool call or the end; a tool call is one tool_use
    block whose input arrives as one input_json_delta. `message_delta` names the stop sequence of `stops` the
    reply ended on, when the source said (stop_sequence_of)."""

    where = "/v1/messages"

    def __init__(self, *, mid: str, model: str, stops: list[str] | None = None):
        super().__init__()
        self.stops = stops
        start = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
                 "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        self.out += [_event({"type": "message_start", "message": start}), _event({"type": "ping"})]
        self.usage = Usage()
        self.finish = "stop"
        self.stopped_on: str | None = None
        self.index = -1
        self.text_head: bytes | None = None  # the open text block's delta template head (None: no block open)

    def render(self, batch: list[StreamEvent]) -> None:
        out = self.out
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                head = self.text_head or self._open_text()
                # Most of a stream's events: bytes from a template, as _event would give them, without building
                # and encoding the object each time.
                out.append(head + json_text(event.text) + b"}}\n\n")
            elif isinstance(event, ToolCallEvent):
                self._close_text()
                self.index += 1
                index = self.index
                out.append(_event({"type": "content_block_start", "index": index,
                                   "content_block": {**tool_use_block(event.call), "input": {}}}))
                out.append(_event({"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(event.call.arguments)}}))
                out.append(_event({"type": "content_block_stop", "index": index}))
            elif isinstance(event, Usage):
                self.usage = event
            elif isinstance(event, Finish):
                self.finish, self.stopped_on = event.reason, stop_sequence_of(event.stop_sequence, self.stops)

    def _open_text(self) -> bytes:
        self.index += 1
        self.out.append(_event({"type": "content_block_start", "index": self.index,
                                "content_block": {"type": "text", "text": ""}}))
        self.text_head = (b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": '
                          + str(self.index).encode() + b', "delta": {"type": "text_delta", "text": ')
        return self.text_head

    def _close_text(self) -> None:
        if self.text_head is not None:
            self.out.append(_event({"type": "content_block_stop", "index": self.index}))
            self.text_head = None

    async def close(self) -> None:
        self._close_text()
        self.out.append(_event({"type": "message_delta", "delta": {
            "stop_reason": stop_reason(self.finish, self.stopped_on), "stop_sequence": self.stopped_on},
            "usage": _usage(self.usage)}))
        self.out.append(_event({"type": "message_stop"}))

    def failed(self, exc: AppError) -> bytes:
        return error_event(exc)


def message_events(first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]], *, mid: str, model: str,
                   stops: list[str] | None = None) -> AsyncIterator[bytes]:
    """The typed events for `first` and then each batch (compat.stream.drive); a client hang-up cancels this
    and, with it, the upstream."""
    return drive(MessageRenderer(mid=mid, model=model, stops=stops), first, batches)


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
