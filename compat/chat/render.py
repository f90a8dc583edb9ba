"""The chat door's replies: the runtime's reply as a chat.completion object, and its stream as
chat.completion.chunk events ending with `[DONE]` (a Renderer for compat.stream); errors in OpenAI's shape."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from django.http import JsonResponse

from agentsite.agent.types import Finish, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from agentsite.core.errors import AppError, openai_error
from agentsite.core.sse import json_text, sse_event
from compat.stream import Renderer, drive


def completion_id() -> str:
    return f"chatcmpl-{secrets.token_hex(16)}"


def tool_call_out(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.arguments_text}}
    if index is not None:
        out = {"index": index, **out}
    return out


def logprobs_out(content: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """A choice's `logprobs` for the upstream's token entries: null when it sent none."""
    return None if content is None else {"content": content, "refusal": None}


def completion_object(*, cid: str, model: str, text: str, tool_calls: list[ToolCall], finish_reason: str,
                      usage: dict[str, int], logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not tool_calls else None,
                               "refusal": None}
    if tool_calls:
        message["tool_calls"] = [tool_call_out(call) for call in tool_calls]
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason,
                                        "logprobs": logprobs_out(logprobs)}],
            "usage": usage, "system_fingerprint": None}


def chunk_object(*, cid: str, created: int, model: str, delta: dict[str, Any] | None = None,
                 finish_reason: str | None = None, usage: dict[str, int] | None = None,
                 logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "system_fingerprint": None}
    if usage is not None:
        chunk["choices"], chunk["usage"] = [], usage
    else:
        chunk["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason,
                             "logprobs": logprobs_out(logprobs)}]
    return chunk


def finish_reason_out(reason: str) -> str:
    # OpenAI clients know stop | length | tool_calls | content_filter; the agent's round limit reads as length.
    return reason if reason in {"stop", "length", "tool_calls", "content_filter"} else (
        "length" if reason == "max_rounds" else "stop")


def error_response(exc: AppError) -> JsonResponse:
    """An AppError in OpenAI's error shape, so that SDKs raise the matching exception class."""
    response = JsonResponse(openai_error(exc), status=exc.status)
    for name, value in exc.headers.items():
        response[name] = value
    if exc.status == 401 and "WWW-Authenticate" not in exc.headers:
        response["WWW-Authenticate"] = 'Bearer realm="v1"'
    return response


def error_event(exc: AppError) -> bytes:
    """An AppError as the error chunk that ends a started stream (SDKs raise it as an APIError)."""
    return sse_event(openai_error(exc))


_SPLIT = "\x00split\x00"
_SPLIT_JSON = json.dumps(_SPLIT).encode()


class ChunkRenderer(Renderer):
    """chat.completion.chunk events: the role chunk first, a chunk per text delta and per tool call, then the
    finish chunk, the usage chunk (when `include_usage`) and `[DONE]`."""

    def __init__(self, *, cid: str, model: str, include_usage: bool):
        super().__init__()
        self.cid, self.model, self.include_usage = cid, model, include_usage
        self.created = int(time.time())
        # A text delta is most of a stream's chunks: its bytes are this stream's one template around the text,
        # byte for byte what chunk(delta={"content": text}) gives, without building and encoding the object.
        self.head, self.tail = self.chunk(delta={"content": _SPLIT}).split(_SPLIT_JSON)
        self.usage = Usage()
        self.finish = "stop"
        self.tool_index = 0
        self.out.append(self.chunk(delta={"role": "assistant", "content": ""}))

    def chunk(self, **fields: Any) -> bytes:
        return sse_event(chunk_object(cid=self.cid, created=self.created, model=self.model, **fields))

    def render(self, batch: list[StreamEvent]) -> None:
        out, head, tail = self.out, self.head, self.tail
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                if event.logprobs is None:
                    out.append(head + json_text(event.text) + tail)
                else:  # the upstream's log probabilities of these tokens, relayed
                    out.append(self.chunk(delta={"content": event.text}, logprobs=event.logprobs))
            elif isinstance(event, ToolCallEvent):
                out.append(self.chunk(delta={"tool_calls": [tool_call_out(event.call, index=self.tool_index)]}))
                self.tool_index += 1
            elif isinstance(event, Usage):
                self.usage = event
            elif isinstance(event, Finish):
                self.finish = event.reason

    async def close(self) -> None:
        self.out.append(self.chunk(delta={}, finish_reason=finish_reason_out(self.finish)))
        if self.include_usage:
            self.out.append(self.chunk(usage=self.usage.as_dict()))
        self.out.append(sse_event("[DONE]"))

    def failed(self, exc: AppError) -> bytes:
        return error_event(exc)


def chunks(first: list[StreamEvent], batches: AsyncIterator[list[StreamEvent]], *, cid: str, model: str,
           include_usage: bool) -> AsyncIterator[bytes]:
    """The chunk events for `first` and then each batch (compat.stream.drive)."""
    return drive(ChunkRenderer(cid=cid, model=model, include_usage=include_usage), first, batches)
