"""Provider-neutral types: what the runtime asks a model, and what a model streams back.

Providers translate these to and from their wire formats; nothing outside `providers/` sees a wire format.
`tool_choice` uses OpenAI's vocabulary ("auto" | "none" | "required" | {"type": "function", "function":
{"name": ...}}) because the /v1 compat layer passes it through; other providers translate it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]

# The longest message the agent takes, in characters (docs/api.md: the chat endpoint and any /v1 message).
MAX_MESSAGE_CHARS = 32_000

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,(?P<data>.*)$", re.DOTALL)


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    mime_type: str
    data: bytes = field(repr=False)

    @classmethod
    def from_base64(cls, mime_type: str, data: str) -> ImagePart:
        """Raises ValueError when `data` is not base64."""
        try:
            return cls(mime_type, base64.b64decode(data, validate=True))
        except binascii.Error as exc:
            raise ValueError(f"The image data is not valid base64: {exc}") from exc

    @classmethod
    def from_data_url(cls, url: str) -> ImagePart:
        """Parse `data:<mime>;base64,<data>`; raises ValueError for anything else."""
        match = _DATA_URL.match(url.strip())
        if not match:
            raise ValueError("An image must be a base64 data URL (data:<mime>;base64,...).")
        return cls.from_base64(match["mime"] or "application/octet-stream", match["data"])

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    @property
    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.base64}"

    def __repr__(self) -> str:
        return f"ImagePart({self.mime_type!r}, <{len(self.data)} bytes>)"


ContentPart = TextPart | ImagePart


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # Set when the model's arguments were not a JSON object: the call is answered with a tool error.
    arguments_error: str | None = None
    # With arguments_error: the arguments' text as it came, which a door that carries arguments as a string
    # passes on as it is (never `{}`).
    raw_arguments: str | None = None

    @property
    def arguments_text(self) -> str:
        """The arguments as a JSON string for the wire: the text as it came when it was not a JSON object."""
        return self.raw_arguments if self.raw_arguments is not None else json.dumps(self.arguments)

    @classmethod
    def parsed(cls, call_id: str, name: str, raw: str | dict[str, Any] | None) -> ToolCall:
        """A call whose arguments arrive as JSON text (or already decoded). Arguments that are not a JSON
        object (invalid JSON, an array, a number) give `{}` with `arguments_error` saying why; nothing else
        is guessed, whichever side (a provider, a /v1 client's history) sent them. Empty text is `{}`.
        """
        if isinstance(raw, dict):
            return cls(call_id, name, raw)
        text = raw or ""
        try:
            arguments = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            return cls(call_id, name, {}, arguments_error=f"The arguments were not valid JSON ({exc}): {text!r}",
                       raw_arguments=text)
        if not isinstance(arguments, dict):
            return cls(call_id, name, {}, arguments_error=f"The arguments must be a JSON object, not {text!r}",
                       raw_arguments=text)
        return cls(call_id, name, arguments)


@dataclass
class Message:
    role: Role
    content: str | list[ContentPart] = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # role "tool": the call this answers
    name: str | None = None  # role "tool": the tool's name
    is_error: bool = False  # role "tool": the tool failed
    # role "assistant": the client sent `content: null` (an OpenAI-format upstream gets null back; else the text,
    # `""` included: llama.cpp refuses null next to tool calls)
    null_content: bool = False

    @property
    def parts(self) -> list[ContentPart]:
        if isinstance(self.content, str):
            return [TextPart(self.content)] if self.content else []
        return list(self.content)

    @property
    def text(self) -> str:
        """The text parts joined; images are left out."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        if isinstance(self.content, str):
            return []
        return [part for part in self.content if isinstance(part, ImagePart)]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ModelSettings:
    model: str = ""  # empty: the provider's default model
    temperature: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None


@dataclass
class ChatRequest:
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    settings: ModelSettings = field(default_factory=ModelSettings)
    tool_choice: str | dict[str, Any] | None = None
    # Structured output in OpenAI's chat vocabulary ({"type": "json_schema", "json_schema": {"name", "schema",
    # "strict"}}): the OpenAI provider passes it on, the Anthropic one makes it a forced tool; callers refuse it
    # where neither applies (`Provider.carries_response_format`).
    response_format: dict[str, Any] | None = None
    # The other request fields of OpenAI's chat vocabulary (SAMPLING_FIELDS: top_p, seed, logit_bias, user, ...;
    # and, with a passthrough connection, any field), as the client sent them. A provider passes on or
    # translates those it can carry (Provider.carries) and the doors refuse a request with any other (400
    # naming it) before it is sent: none is dropped.
    extra: dict[str, Any] = field(default_factory=dict)
    # Request fields no door knows, for a connection with `passthrough` (the doors refuse them for any other):
    # every provider puts them in its body as they came, under the fields it builds itself.
    passthrough: dict[str, Any] = field(default_factory=dict)


# The chat fields a door carries in ChatRequest.extra (docs/api.md, /v1: what each upstream dialect does with them).
SAMPLING_FIELDS = ("top_p", "top_k", "seed", "frequency_penalty", "presence_penalty", "logprobs", "top_logprobs",
                   "logit_bias", "parallel_tool_calls", "user", "n", "service_tier", "metadata")


# Stream events, in the order a provider yields them: TextDelta* and ToolCallEvent* interleaved,
# then at most one Usage, then exactly one Finish (the last event).


@dataclass(frozen=True)
class TextDelta:
    text: str
    # The upstream's log probabilities of this text's tokens (OpenAI's `logprobs.content` entries), when the
    # request asked for them and the upstream sent them; the doors relay them.
    logprobs: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ToolCallEvent:
    call: ToolCall


@dataclass(frozen=True)
class Usage:
    """Tokens of a call. `estimated`: counted from the text (agentsite.agent.routing, when the upstream said
    nothing), not the upstream's own figures; a sum is estimated when any part is."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                     self.estimated or other.estimated)

    def as_dict(self) -> dict[str, int | bool]:
        """OpenAI's usage object; `estimated: true` is added when the figures are an estimate."""
        usage: dict[str, int | bool] = {"prompt_tokens": self.prompt_tokens,
                                        "completion_tokens": self.completion_tokens, "total_tokens": self.total_tokens}
        if self.estimated:
            usage["estimated"] = True
        return usage


FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "max_rounds"] | str


@dataclass(frozen=True)
class Finish:
    """Why the reply ended. `stop_sequence`: which of the request's `settings.stop` ended it, when the upstream
    says so (Anthropic's `stop_sequence`; an OpenAI-format server that reports vLLM's `stop_reason` string);
    None otherwise, including when a stop sequence ended it but the upstream did not say which (OpenAI's
    `finish_reason: "stop"` alone does not tell it from the model's own end)."""

    reason: FinishReason = "stop"
    stop_sequence: str | None = None


StreamEvent = TextDelta | ToolCallEvent | Usage | Finish


@dataclass
class Completion:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: FinishReason = "stop"
    stop_sequence: str | None = None  # as Finish.stop_sequence
    logprobs: list[dict[str, Any]] | None = None  # as TextDelta.logprobs, for the whole text
