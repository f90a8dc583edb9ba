"""One Responses request as a compat.run.Run: its translated ChatRequest, the response object it answers (the
fixed fields encoded once per run), and what it stores."""

from __future__ import annotations

import json
import time
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentsite.agent.types import ChatRequest, Message, ModelSettings, ToolSpec, Usage
from agentsite.agent.usage import Caller
from agentsite.core.sse import json_text
from compat.responses import store
from compat.responses.translate import chat_extra, check_length, input_items, response_format, to_messages, tool_choice
from compat.responses.wire import ResponseRequest, invalid, new_id
from compat.run import Run

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from agentsite.agent.config import AgentSettings

class ResponseRun(Run):
    """One /v1/responses request as a Run: the same model resolution, router, agent, workflows and metering; its
    own messages and ChatRequest. Raises AppError 400/404 before anything is sent."""

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
            raise invalid("input", "give at least one input item (or a previous_response_id).")
        if body.instructions:
            check_length("instructions", len(body.instructions))
            messages.insert(0, Message("system", body.instructions))
        tools = [ToolSpec(tool.name, tool.description or "",
                          tool.parameters or {"type": "object", "properties": {}}) for tool in body.tools or []]
        self.tools = tools
        self.tool_choice = tool_choice(body.tool_choice)
        self.response_format = response_format(body)
        # What the engine's shared paths (the router, the agent, workflows) are given: this dialect's request.
        request = ChatRequest(messages=messages, tools=tools, tool_choice=self.tool_choice,
                              response_format=self.response_format, extra=chat_extra(body),
                              passthrough=dict(unknown or {}),
                              settings=ModelSettings(model=body.model, temperature=body.temperature,
                                                     max_tokens=body.max_output_tokens))
        # raises 400 naming a field (text.format, top_p, ...) the model's upstreams cannot carry
        super().__init__(request, settings=settings, user=user, caller=caller)
        if self.provider is None and self.tools:  # the agent or a workflow: they answer with their own tools
            raise invalid("tools", f"the model {body.model!r} runs its own tools; send tools to a catalogue "
                           "model.")

    def response(self, *, status: str, output: list[dict[str, Any]], usage: Usage | None,
                 finish: str = "stop", error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object. A reply cut by max_output_tokens is `incomplete`, as OpenAI has it."""
        status, incomplete = status_of(status, finish)
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
        each field), from a template, cheaper than encoding the dict each time. A field a request leaves unset
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
        """Keeps the response and the conversation it ends for its owner (store.save), unless `store: false`."""
        if self.spec.store:
            await store.save(self, response)


# The response object's fixed fields, in _fixed's order: what json.dumps(run._fixed) gives without its closing brace.


_FIXED_HEAD = (b'{"id": "%s", "object": "response", "created_at": %d, "instructions": %s, "max_output_tokens": %s, '
               b'"model": %s, "parallel_tool_calls": %s, "previous_response_id": %s, "store": %s, '
               b'"temperature": %s, "top_p": %s, "text": %s, "tool_choice": %s, "tools": %s, '
               b'"truncation": "disabled", "metadata": %s, "user": %s')


def _json_or_null(value: Any) -> bytes:
    return b"null" if value is None else json.dumps(value).encode()


def status_of(status: str, finish: str) -> tuple[str, dict[str, Any] | None]:
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
