"""Fake upstream LLM servers speaking the OpenAI `/chat/completions` and Anthropic `/v1/messages` wire formats.

`GET /v1/models` lists `fake.models` (or answers `fake.models_error`), for discovery.

Script replies per test with `fake.script(...)`; each request takes the next one (a reply, or a function of
the request returning one); with none left, `default_reply` answers (by default a 500 saying so). The same
reply answers a streaming and a non-streaming request, in the wire format's own shape for each. Like the
real services, the fakes reject requests whose message history is malformed (with a 400).

From another process, script over HTTP: POST /_fake/script with a JSON list of reply dicts (see
`reply_from_dict`), GET /_fake/requests, GET /_fake/state, POST /_fake/reset.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections import deque
from typing import Any

from tests.fakes.http import Chunk, FakeResponse, FakeServer, RecordedRequest

# The replies live in replies.py; they are importable from here too, as tests script them with the fakes.
from tests.fakes.replies import (
    Call,
    Drop,
    Echo,
    Error,
    Hang,
    Raw,
    Reply,
    ReplyOrFunction,
    StreamError,
    Text,
    ToolCalls,
    Truncated,
    last_user_text,
    reply_from_dict,
    split_in,
    split_words,
    sse,
)

__all__ = ["Call", "Drop", "Echo", "Error", "FakeAnthropic", "FakeLLMServer", "FakeLlamaCpp", "FakeOpenAI", "Hang",
           "Raw", "Reply",
           "StreamError", "Text", "ToolCalls", "Truncated", "reply_from_dict"]


class FakeLLMServer(FakeServer):
    """The scripting and control plumbing both wire formats share."""

    path = ""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, default_reply: Reply | None = None):
        super().__init__(host, port)
        self.default_reply = default_reply
        # GET /v1/models (OpenAI's and Anthropic's model list): these names, or `models_error` when set.
        self.models: list[str] = ["fake-model"]
        self.models_error: Error | None = None
        self._replies: deque[ReplyOrFunction] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # (time, prompt_tokens, completion_tokens) of each reply that reported its usage: what the upstream billed.
        self.usage_log: list[tuple[float, int, int]] = []

    def script(self, *replies: ReplyOrFunction) -> FakeLLMServer:
        with self._lock:
            self._replies.extend(replies)
        return self

    @property
    def pending(self) -> int:
        return len(self._replies)

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._replies.clear()
            self.usage_log.clear()
        self.models, self.models_error = ["fake-model"], None

    def usage_total(self) -> tuple[int, int]:
        """(prompt_tokens, completion_tokens) reported in all replies since the last reset."""
        with self._lock:
            return sum(p for _, p, _ in self.usage_log), sum(c for _, _, c in self.usage_log)

    def streams_usage(self, body: dict[str, Any]) -> bool:
        """Whether a streamed reply to this request reports its usage."""
        return True

    def bodies(self) -> list[Any]:
        """The JSON bodies received at the completion endpoint, in order."""
        return [request.json() for request in self.requests if request.path.endswith(self.path)]

    def record(self, request: RecordedRequest) -> bool:
        return not request.path.startswith("/_fake/")

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.path.startswith("/_fake/"):
            return self._control(request)
        if request.method == "GET" and request.path == "/v1/models":
            if self.models_error is not None:
                return self.render(self.models_error, request, {})
            return FakeResponse.json({"object": "list", "data": [{"id": name, "object": "model", "type": "model",
                                                                  "owned_by": "fake"} for name in self.models],
                                      "has_more": False})
        if request.method != "POST" or not request.path.endswith(self.path):
            return FakeResponse.json({"error": {"message": f"no route {request.method} {request.path}"}}, 404)
        try:
            body = request.json()
        except ValueError:
            return self.render(Error(400, "The body is not JSON.", "invalid_request_error"), request, {})
        problem = self.problem(request, body)
        if problem:
            return self.render(Error(400, problem, "invalid_request_error"), request, body)
        reply = self._next_reply(request)
        if isinstance(reply, Echo):
            reply = Text(reply.prefix + last_user_text(body.get("messages", [])))
        return self.render(reply, request, body)

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            reply = self._replies.popleft() if self._replies else self.default_reply
        if reply is None:
            return Error(500, "The fake upstream has no scripted reply left for this request.")
        return reply(request) if callable(reply) else reply

    def _control(self, request: RecordedRequest) -> FakeResponse:
        if request.path == "/_fake/script" and request.method == "POST":
            self.script(*(reply_from_dict(item) for item in request.json()))
            return FakeResponse.json({"pending": self.pending})
        if request.path == "/_fake/reset" and request.method == "POST":
            self.requests.clear()
            self.hangups = 0
            with self._lock:
                self._replies.clear()
                self.usage_log.clear()
            return FakeResponse.json({"ok": True})
        if request.path == "/_fake/requests":
            return FakeResponse.json([{"method": r.method, "path": r.target, "headers": r.headers,
                                       "body": r.body.decode("utf-8", "replace")} for r in self.requests])
        if request.path == "/_fake/state":
            prompt, completion = self.usage_total()
            return FakeResponse.json({"requests": len(self.requests), "hangups": self.hangups,
                                      "pending": self.pending, "usage": {"prompt_tokens": prompt,
                                                                         "completion_tokens": completion}})
        if request.path == "/_fake/usage":
            with self._lock:
                return FakeResponse.json([list(entry) for entry in self.usage_log])
        return FakeResponse.json({"error": "unknown control path"}, 404)

    def problem(self, request: RecordedRequest, body: dict[str, Any]) -> str | None:
        return None

    def render(self, reply: Reply, request: RecordedRequest, body: dict[str, Any]) -> FakeResponse:
        """The reply in this wire format: the error, raw and drop cases here, the rest by the subclass."""
        if isinstance(reply, Error):
            return FakeResponse.json(self.error_body(reply), reply.status)
        if isinstance(reply, Raw):
            return _raw(reply)
        if isinstance(reply, Drop):
            return FakeResponse(drop=True)
        stream = bool(body.get("stream"))
        if isinstance(reply, Text) and self.stops(body):
            reply = reply.stopped_at(self.stops(body))
        if isinstance(reply, Text | ToolCalls) and (not stream or self.streams_usage(body)):
            with self._lock:
                self.usage_log.append((time.time(), *reply.usage))
        if isinstance(reply, Hang) and not stream:
            return FakeResponse(delay=math.inf)
        if not stream:
            return FakeResponse.json(self.whole(reply, body))
        return self._stream(reply, body)

    def error_body(self, reply: Error) -> dict[str, Any]:
        raise NotImplementedError

    def stops(self, body: dict[str, Any]) -> list[str]:
        """The request's stop sequences, which a reply's text is cut at (Text.stopped_at)."""
        return []

    def whole(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming reply body."""
        raise NotImplementedError

    def _stream(self, reply: Reply, body: dict[str, Any]) -> FakeResponse:
        raise NotImplementedError

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"


def _raw(reply: Raw) -> FakeResponse:
    if reply.pieces is None:
        return FakeResponse(reply.status, reply.body.encode(), reply.content_type)
    return FakeResponse(reply.status, content_type=reply.content_type,
                        chunks=[Chunk(piece.encode(), after=reply.step if index else None)
                                for index, piece in enumerate(reply.pieces)])


# --- OpenAI ---


class FakeOpenAI(FakeLLMServer):
    """POST {base_url}/chat/completions; `base_url` ends in /v1 like OpenAI's."""

    path = "/chat/completions"
    # OpenAI's own API says only finish_reason "stop" when a stop sequence ended the reply; vLLM's server adds
    # `stop_reason`, the sequence. True: this fake says it as vLLM does (reset() turns it off).
    reports_stop_reason = False

    @property
    def base_url(self) -> str:
        return super().base_url + "/v1"

    @property
    def root_url(self) -> str:
        return super().base_url

    def streams_usage(self, body: dict[str, Any]) -> bool:
        return bool((body.get("stream_options") or {}).get("include_usage"))

    def stops(self, body: dict[str, Any]) -> list[str]:
        stop = body.get("stop")
        return [stop] if isinstance(stop, str) else [item for item in stop or [] if isinstance(item, str)]

    def reset(self) -> None:
        super().reset()
        self.reports_stop_reason = False

    def _stop_fields(self, reply: Reply) -> dict[str, Any]:
        if not self.reports_stop_reason:
            return {}
        return {"stop_reason": reply.stop_sequence if isinstance(reply, Text) else None}

    def problem(self, request: RecordedRequest, body: dict[str, Any]) -> str | None:
        if not body.get("model"):
            return "you must provide a model parameter"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "'messages' must be a non-empty array"
        pending: set[str] = set()
        for index, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                if message.get("tool_call_id") not in pending:
                    return (f"messages[{index}]: a 'tool' message must answer a tool_call_id of the preceding "
                            "assistant message")
                pending.discard(message["tool_call_id"])
                continue
            if pending:
                return f"messages[{index}]: tool_call_ids {sorted(pending)} have no tool message"
            if role == "assistant":
                pending = {call["id"] for call in message.get("tool_calls") or []}
            elif role not in ("system", "user", "developer"):
                return f"messages[{index}]: unknown role {role!r}"
        return None

    def error_body(self, reply: Error) -> dict[str, Any]:
        return {"error": {"message": reply.message, "type": reply.type, "param": reply.param, "code": reply.code}}

    def whole(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        return self._completion(reply, body)

    def _envelope(self, body: dict[str, Any], obj: str) -> dict[str, Any]:
        return {"id": self.new_id("chatcmpl-fake"), "object": obj, "created": int(time.time()),
                "model": body.get("model", "fake"), "system_fingerprint": None}

    def _completion(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        finish, usage = "stop", (1, 1)
        if isinstance(reply, Text):
            message["content"], finish, usage = reply.text, reply.finish_reason, reply.usage
        elif isinstance(reply, ToolCalls):
            message["content"] = reply.text or None
            message["tool_calls"] = [self._call(call) for call in reply.calls]
            finish, usage = "tool_calls", reply.usage
        else:  # Truncated / StreamError only differ when streamed
            message["content"] = getattr(reply, "text", "")
        return {**self._envelope(body, "chat.completion"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None,
                             **self._stop_fields(reply), **self._logprobs(body, message["content"] or "")}],
                "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                          "total_tokens": usage[0] + usage[1]}}

    def _logprobs(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        """OpenAI's `logprobs` of a choice for `text` when the request asked (one token per word here, each
        logprob -0.25, with `top_logprobs` alternatives): {} when it did not."""
        if not body.get("logprobs") or not text:
            return {}
        tokens = re.findall(r"\S+\s*|\s+", text)
        top = int(body.get("top_logprobs") or 0)
        return {"logprobs": {"content": [
            {"token": token, "logprob": -0.25, "bytes": list(token.encode()),
             "top_logprobs": [{"token": token, "logprob": -0.25, "bytes": list(token.encode())}][:top]}
            for token in tokens], "refusal": None}}

    def _call(self, call: Call) -> dict[str, Any]:
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        return {"id": call.id or self.new_id("call_fake"), "type": "function",
                "function": {"name": call.name, "arguments": arguments}}

    def _chunk(self, body: dict[str, Any], delta: dict[str, Any], finish: str | None = None,
               **extra: Any) -> bytes:
        return sse({**self._envelope(body, "chat.completion.chunk"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None, **extra}]})

    def _stream(self, reply: Reply, body: dict[str, Any]) -> FakeResponse:
        chunks = [Chunk(self._chunk(body, {"role": "assistant", "content": ""}))]
        text = getattr(reply, "text", "")
        pieces = reply.deltas() if isinstance(reply, Text) else split_words(text) if text else []
        delay = getattr(reply, "delay", 0.0)
        chunks += [Chunk(self._chunk(body, {"content": piece}, **self._logprobs(body, piece)), delay)
                   for piece in pieces]
        if isinstance(reply, Hang | Truncated):
            return FakeResponse(content_type="text/event-stream", chunks=chunks, hang=isinstance(reply, Hang),
                                truncate=isinstance(reply, Truncated))
        if isinstance(reply, StreamError):
            chunks.append(Chunk(sse({"error": {"message": reply.message, "type": "server_error"}})))
            return FakeResponse(content_type="text/event-stream", chunks=chunks)
        finish, usage = "stop", (1, 1)
        if isinstance(reply, Text):
            finish, usage = reply.finish_reason, reply.usage
        elif isinstance(reply, ToolCalls):
            chunks += self._call_chunks(body, reply)
            finish, usage = "tool_calls", reply.usage
        chunks.append(Chunk(self._chunk(body, {}, finish, **self._stop_fields(reply))))
        if self.streams_usage(body):
            chunks.append(Chunk(sse({**self._envelope(body, "chat.completion.chunk"), "choices": [],
                                     "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                               "total_tokens": sum(usage)}})))
        chunks.append(Chunk(b"data: [DONE]\n\n"))
        return FakeResponse(content_type="text/event-stream", chunks=chunks)

    def _call_chunks(self, body: dict[str, Any], reply: ToolCalls) -> list[Chunk]:
        """The real shape: the first delta has id, type, name and a piece of the arguments; later ones add pieces."""
        chunks = []
        for index, call in enumerate(reply.calls):
            wire = self._call(call)
            first, *rest = split_in(wire["function"]["arguments"], 3)
            chunks.append(Chunk(self._chunk(body, {"tool_calls": [{
                "index": index, "id": wire["id"], "type": "function",
                "function": {"name": call.name, "arguments": first}}]}), reply.delay))
            chunks += [Chunk(self._chunk(body, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                             reply.delay) for piece in rest]
        return chunks


class FakeLlamaCpp(FakeOpenAI):
    """An OpenAI-format server as llama.cpp's (llama-cpp-python's) behaves: a stream never reports its usage,
    even when `stream_options.include_usage` asks; a prompt over `context_chars` characters (the messages'
    text together) is refused with 400 `context_length_exceeded`; an assistant message with tool calls whose
    `content` is null is refused with a 400 (its chat template needs a string)."""

    context_chars = 2000

    def streams_usage(self, body: dict[str, Any]) -> bool:
        return False

    def problem(self, request: RecordedRequest, body: dict[str, Any]) -> str | None:
        problem = super().problem(request, body)
        if problem:
            return problem
        for index, message in enumerate(body["messages"]):
            if message.get("role") == "assistant" and message.get("tool_calls") and message.get("content") is None:
                return f"messages[{index}]: content must be a string, not null"
        return None

    def render(self, reply: Reply, request: RecordedRequest, body: dict[str, Any]) -> FakeResponse:
        size = sum(len(json.dumps(message.get("content"))) for message in body.get("messages") or [])
        if size > self.context_chars:
            reply = Error(400, f"This model's maximum context length is {self.context_chars} tokens. However, "
                          f"you requested {size} tokens.", "invalid_request_error", "context_length_exceeded",
                          "messages")
        return super().render(reply, request, body)


# --- Anthropic ---

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


class FakeAnthropic(FakeLLMServer):
    """POST {base_url}/v1/messages."""

    path = "/v1/messages"

    def problem(self, request: RecordedRequest, body: dict[str, Any]) -> str | None:
        if "anthropic-version" not in request.headers:
            return "anthropic-version: header is required"
        for name in ("model", "max_tokens", "messages"):
            if name not in body:
                return f"{name}: Field required"
        messages = body["messages"]
        if not messages or messages[0].get("role") != "user":
            return "messages: the first message must use the user role"
        for index, message in enumerate(messages):
            problem = self._message_problem(index, message, messages[index - 1] if index else None)
            if problem:
                return problem
        return None

    def _message_problem(self, index: int, message: dict[str, Any], previous: dict[str, Any] | None) -> str | None:
        role, content = message.get("role"), message.get("content")
        if previous and previous.get("role") == role:
            return f"messages.{index}: roles must alternate between user and assistant"
        if role not in ("user", "assistant"):
            return f"messages.{index}.role: must be user or assistant"
        if isinstance(content, str):
            return None if content else f"messages.{index}: content must be non-empty"
        for block in content or []:
            if block.get("type") == "text" and not block.get("text"):
                return f"messages.{index}: text content blocks must be non-empty"
        called = {block.get("id") for block in (previous or {}).get("content") or []
                  if isinstance(block, dict) and block.get("type") == "tool_use"}
        for block in content or []:
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                return (f"messages.{index}: unexpected tool_use_id {block.get('tool_use_id')!r} in tool_result "
                        "blocks: each must have a corresponding tool_use block in the previous message")
        return None

    def error_body(self, reply: Error) -> dict[str, Any]:
        return {"type": "error", "error": {"type": reply.type, "message": reply.message}}

    def stops(self, body: dict[str, Any]) -> list[str]:
        return [item for item in body.get("stop_sequences") or [] if isinstance(item, str)]

    @staticmethod
    def _stop(reply: Reply) -> tuple[str, str | None]:
        """(stop_reason, stop_sequence) for a text reply, as Anthropic says them."""
        if not isinstance(reply, Text):
            return "end_turn", None
        if reply.stop_sequence is not None:
            return "stop_sequence", reply.stop_sequence
        return _STOP_REASONS.get(reply.finish_reason, reply.finish_reason), None

    def whole(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        return self._message(reply, body)

    def _message(self, reply: Reply, body: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        text = getattr(reply, "text", "")
        if text:
            content.append({"type": "text", "text": text})
        (stop, sequence), usage = self._stop(reply), (1, 1)
        if isinstance(reply, Text):
            usage = reply.usage
        elif isinstance(reply, ToolCalls):
            content += [self._tool_use(call) for call in reply.calls]
            stop, usage = "tool_use", reply.usage
        return {"id": self.new_id("msg_fake"), "type": "message", "role": "assistant", "model": body.get("model"),
                "content": content, "stop_reason": stop, "stop_sequence": sequence,
                "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}

    def _tool_use(self, call: Call) -> dict[str, Any]:
        arguments = call.arguments
        if isinstance(arguments, str):  # invalid JSON can only be streamed; a whole message carries an object
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        return {"type": "tool_use", "id": call.id or self.new_id("toolu_fake"), "name": call.name, "input": arguments}

    def _event(self, data: dict[str, Any], delay: float = 0.0) -> Chunk:
        return Chunk(sse(data, data["type"]), delay)

    def _stream(self, reply: Reply, body: dict[str, Any]) -> FakeResponse:
        usage = getattr(reply, "usage", (1, 1))
        start = {"id": self.new_id("msg_fake"), "type": "message", "role": "assistant", "model": body.get("model"),
                 "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {"input_tokens": usage[0], "output_tokens": 1}}
        chunks = [self._event({"type": "message_start", "message": start}), self._event({"type": "ping"})]
        chunks += self._text_events(reply)
        if isinstance(reply, Hang | Truncated):
            return FakeResponse(content_type="text/event-stream", chunks=chunks, hang=isinstance(reply, Hang),
                                truncate=isinstance(reply, Truncated))
        if isinstance(reply, StreamError):
            chunks.append(self._event({"type": "error", "error": {"type": "overloaded_error",
                                                                  "message": reply.message}}))
            return FakeResponse(content_type="text/event-stream", chunks=chunks)
        stop, sequence = self._stop(reply)
        if isinstance(reply, ToolCalls):
            chunks += self._tool_events(reply, first_index=1 if reply.text else 0)
            stop = "tool_use"
        chunks.append(self._event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": sequence},
                                   "usage": {"output_tokens": usage[1]}}))
        chunks.append(self._event({"type": "message_stop"}))
        return FakeResponse(content_type="text/event-stream", chunks=chunks)

    def _text_events(self, reply: Reply) -> list[Chunk]:
        text = getattr(reply, "text", "")
        pieces = reply.deltas() if isinstance(reply, Text) else split_words(text) if text else []
        if not "".join(pieces):
            return []
        delay = getattr(reply, "delay", 0.0)
        chunks = [self._event({"type": "content_block_start", "index": 0,
                               "content_block": {"type": "text", "text": ""}})]
        chunks += [self._event({"type": "content_block_delta", "index": 0,
                                "delta": {"type": "text_delta", "text": piece}}, delay) for piece in pieces]
        if not isinstance(reply, Hang | Truncated | StreamError):
            chunks.append(self._event({"type": "content_block_stop", "index": 0}))
        return chunks

    def _tool_events(self, reply: ToolCalls, first_index: int) -> list[Chunk]:
        chunks = []
        for index, call in enumerate(reply.calls, start=first_index):
            block = self._tool_use(call)
            raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
            chunks.append(self._event({"type": "content_block_start", "index": index,
                                       "content_block": {**block, "input": {}}}, reply.delay))
            chunks += [self._event({"type": "content_block_delta", "index": index,
                                    "delta": {"type": "input_json_delta", "partial_json": piece}}, reply.delay)
                       for piece in split_in(raw, 3)]
            chunks.append(self._event({"type": "content_block_stop", "index": index}))
        return chunks
