"""The Messages door's wire format (Anthropic's Messages API): the request models, which refuse a field they do not
declare anywhere but at the top level, and the parsed body."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from pydantic import ConfigDict, Field

from compat.http import validate_body
from compat.limits import parsed_body
from compat.wire import WireModel


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


BLOCK_FIELDS = {"text": ({"text"}, {"text"}), "image": ({"source"}, {"source"}),
                 "tool_use": ({"id", "name", "input"}, {"id", "name", "input"}),
                 "tool_result": ({"tool_use_id"}, {"tool_use_id", "content", "is_error"})}
IGNORED_BLOCK_FIELDS = {"type", "cache_control", "citations"}  # checked apart (native, _no_citations)


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


class Conversation(_Wire):
    model: str = Field(min_length=1, description='a model of GET /v1/models: the catalogue, "agent", "workflow:<name>"')
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[SystemBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None


class MessagesRequest(Conversation):
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


class CountTokensRequest(Conversation):
    pass


# Anthropic's own fields (top-level `cache_control` standing for the blocks' too), sent as they are when every
# upstream the model may route to speaks Anthropic's dialect (MessagesCompletion).
NATIVE = ("service_tier", "cache_control")
# `service_tier` in OpenAI's chat vocabulary, for an OpenAI-format upstream.
SERVICE_TIERS = {"auto": "auto", "standard_only": "default"}


def parse(request: HttpRequest, schema: type[Conversation]) -> tuple[Any, dict[str, Any]]:
    """(the request, its top-level fields this door does not know). Those go to a passthrough connection (or
    are refused, compat.run.Run.refuse_unknown) on a message; count_tokens, which sends nothing, refuses them
    here, as any unknown field inside the body (400 `unknown_field` naming it)."""
    body = parsed_body(request, items="messages")
    unknown: dict[str, Any] = {}
    if schema is MessagesRequest:
        unknown = {name: body.pop(name) for name in list(body) if name not in schema.model_fields}
    return validate_body(body, schema), unknown
