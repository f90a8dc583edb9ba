"""The Responses door's wire format: the request model, the fields it takes (SUPPORTED, IGNORED) and the parsed
body; the ids of its responses and items."""

from __future__ import annotations

import random
import secrets
from typing import Any, Literal

from django.http import HttpRequest
from pydantic import ConfigDict, Field

from agentsite.core.errors import AppError
from compat.http import validate_body
from compat.limits import parsed_body
from compat.wire import WireModel

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
    """`prefix_` and 32 random hex digits (128 bits; cheaper than uuid4's formatting)."""
    return f"{prefix}_{secrets.token_hex(16)}"


def item_id() -> str:
    """An output message item's id: `msg_` and 32 hex digits, unique but not a secret nor a key to anything
    (a stored response is found by its own id, new_id's), so from the process's PRNG, cheaper per item than
    secrets' getrandom call."""
    return f"msg_{random.getrandbits(128):032x}"


def invalid(param: str, message: str, code: str = "invalid_value") -> AppError:
    """A 400 naming the request field (`param`)."""
    return AppError(code, f"{param}: {message}", 400, {param: [message]})


def parse_request(request: HttpRequest) -> tuple[ResponseRequest, dict[str, Any]]:
    """(the request, its fields this door does not know: for a passthrough connection, else refused)."""
    body = parsed_body(request, items="input")
    unknown = {name: value for name, value in body.items() if name not in SUPPORTED and name not in IGNORED}
    where = _nul_at(body)
    if where is not None:  # a stored response is JSON in the database, and PostgreSQL refuses a NUL in it
        raise invalid(where, "a NUL character (\\u0000) cannot be stored; remove it.")
    return validate_body(body, ResponseRequest), unknown



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
