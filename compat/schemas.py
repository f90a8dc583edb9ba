"""The OpenAI request shapes /v1 accepts, as explicit pydantic models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    # Clients send fields we do not use (user, seed, logprobs, ...): accept and ignore them. Strict: a value of
    # the wrong JSON type is refused, as by OpenAI ("50" is not a max_tokens, 1 is not a stream flag).
    model_config = ConfigDict(extra="ignore", strict=True)


class ImageURL(_Open):
    url: str
    detail: str | None = None


class ContentPartText(_Open):
    type: Literal["text"]
    text: str


class ContentPartImage(_Open):
    type: Literal["image_url"]
    image_url: ImageURL


class FunctionCall(_Open):
    name: str
    arguments: str = ""


class ToolCallIn(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageIn(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPartText | ContentPartImage] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolDef(_Open):
    type: Literal["function"] = "function"
    function: FunctionDef


class StreamOptions(_Open):
    include_usage: bool = False


class ChatCompletionRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stop: str | list[str] | None = None
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)


class EmbeddingRequest(_Open):
    input: str | list[str]
    model: str
    encoding_format: Literal["float", "base64"] = "float"
