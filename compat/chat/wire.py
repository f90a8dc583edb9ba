"""OpenAI's chat completions, models and embeddings wire formats: the request and reply models of the chat
door, the one definition of their fields (compat/wire.py says how they are used)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from compat.wire import WireModel

MAX_EMBEDDING_INPUTS = 2048


# --- requests -------------------------------------------------------------------------------------

class ImageURL(WireModel):
    url: str = Field(description="a data: URL (base64); remote http(s) URLs are refused, not fetched")
    detail: str | None = None


class ContentPartText(WireModel):
    type: Literal["text"]
    text: str


class ContentPartImage(WireModel):
    type: Literal["image_url"]
    image_url: ImageURL


class FunctionCall(WireModel):
    name: str
    arguments: str = Field(default="", description="JSON text")


class ToolCallIn(WireModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageIn(WireModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPartText | ContentPartImage] | None = Field(
        default=None, description="at most 32,000 characters of text")
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(default=None, description="required on a tool message")


class FunctionDef(WireModel):
    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}},
                                       description="a JSON Schema object")


class ToolDef(WireModel):
    type: Literal["function"] = "function"
    function: FunctionDef


class StreamOptions(WireModel):
    include_usage: bool = False


class ResponseFormat(WireModel):
    type: Literal["text", "json_schema", "json_object"]  # the order of ResponseTextFormat's: one enum in /api/schema
    json_schema: dict[str, Any] | None = Field(default=None, description='with type "json_schema": {name, schema, '
                                               'strict, description}')


class ChatCompletionRequest(WireModel):
    model: str = Field(min_length=1, description='the provider model (GET /v1/models), "agent" or "workflow:<name>"')
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = Field(
        default=None, description='"none", "auto", "required", or {"type": "function", "function": {"name": ...}}')
    stop: str | list[str] | None = None
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1, description="1 only: one choice is all a reply carries")
    response_format: ResponseFormat | None = None
    # Passed on as sent (compat.chat.translate.to_chat_request), or refused with a 400 naming the field where the
    # model's upstream cannot carry it (docs/api.md, /v1: fields per upstream).
    top_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    logit_bias: dict[str, int | float] | None = None  # int | float: -100 goes on as -100, not -100.0
    parallel_tool_calls: bool | None = None
    user: str | None = None
    service_tier: str | None = None
    metadata: dict[str, str] | None = None
    reasoning_effort: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None


class EmbeddingRequest(WireModel):
    input: str | Annotated[list[str], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
    model: str = Field(description='"hash-256"')
    encoding_format: Literal["float", "base64"] = "float"


# --- responses ------------------------------------------------------------------------------------

class ModelCard(WireModel):
    # Documented as a response: every field is in every answer, so all are required in /api/schema.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(WireModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    object: Literal["list"] = "list"
    data: list[ModelCard]
