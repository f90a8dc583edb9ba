"""Scripted replies for the fake LLM servers: provider-neutral, each fake renders them in its wire format."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tests.fakes.http import RecordedRequest


@dataclass
class Text:
    text: str
    pieces: list[str] | None = None  # the deltas; default: about two words each
    delay: float = 0.0  # before each streamed delta
    finish_reason: str = "stop"  # stop | length (in OpenAI's words; the Anthropic fake translates)
    usage: tuple[int, int] = (12, 7)
    # The request's stop sequence the text was cut at (the fakes set it, stopped_at: as the real services do).
    stop_sequence: str | None = None

    def deltas(self) -> list[str]:
        return self.pieces if self.pieces is not None else split_words(self.text)

    def stopped_at(self, stops: list[str]) -> Text:
        """This reply as a service that honours stop sequences sends it: cut before the first of `stops` to
        appear (the one that ends first, as generation meets it), which it leaves out; the deltas cut with it."""
        found = [(self.text.find(stop) + len(stop), stop) for stop in stops if stop and stop in self.text]
        if not found:
            return self
        end, stop = min(found, key=lambda item: (item[0], -len(item[1])))
        cut = self.text[:end - len(stop)]
        pieces, length = [], 0
        for piece in self.deltas():
            if length + len(piece) >= len(cut):
                pieces.append(piece[:len(cut) - length])
                break
            pieces.append(piece)
            length += len(piece)
        return replace(self, text=cut, pieces=[piece for piece in pieces if piece] or [""], finish_reason="stop",
                       stop_sequence=stop)


@dataclass
class Call:
    name: str
    arguments: dict[str, Any] | str  # a str is sent as is, so a test can send invalid JSON
    id: str = ""


@dataclass
class ToolCalls:
    calls: list[Call]
    text: str = ""  # said before the calls
    delay: float = 0.0
    usage: tuple[int, int] = (20, 9)


@dataclass
class Error:
    status: int = 500
    message: str = "The fake upstream failed."
    type: str = "server_error"
    code: str | None = None  # OpenAI's error `code` (`context_length_exceeded`)
    param: str | None = None


@dataclass
class Hang:
    """Send the stream's start (and `text`), then nothing, until the client hangs up; a non-streaming request
    gets no status line at all."""

    text: str = ""


@dataclass
class Truncated:
    """Stream `text`, then close the connection in the middle of the body."""

    text: str = "cut"


@dataclass
class StreamError:
    """Stream `text`, then an error event inside the stream (how both services report a mid-stream failure)."""

    text: str = ""
    message: str = "Overloaded."


@dataclass
class Raw:
    """Exactly this body (malformed streams, odd servers); streamed as `pieces` when given. With `step`, each
    piece after the first is sent once the test releases the semaphore (one release a piece)."""

    body: str
    status: int = 200
    content_type: str = "text/event-stream"
    pieces: list[str] | None = None
    step: threading.Semaphore | None = None


@dataclass
class Echo:
    """Answer with the last user message's text, prefixed: the standalone server's default."""

    prefix: str = "echo: "


@dataclass
class Drop:
    """Close the connection without answering."""


Reply = Text | ToolCalls | Error | Hang | Truncated | StreamError | Raw | Echo | Drop
ReplyOrFunction = Reply | Callable[[RecordedRequest], Reply]

_REPLY_KINDS: dict[str, type] = {"text": Text, "tool_calls": ToolCalls, "error": Error, "hang": Hang,
                                 "truncated": Truncated, "stream_error": StreamError, "raw": Raw, "echo": Echo,
                                 "drop": Drop}


def reply_from_dict(data: dict[str, Any]) -> Reply:
    """{"kind": "text", "text": ..., "delay": ...}, {"kind": "tool_calls", "calls": [{"name", "arguments",
    "id"}], "text": ...}, {"kind": "error", "status", "message"}, {"kind": "hang"}, {"kind": "echo"}, ..."""
    data = dict(data)
    kind = _REPLY_KINDS[data.pop("kind")]
    if kind is ToolCalls:
        data["calls"] = [Call(**call) for call in data["calls"]]
    if "usage" in data:
        data["usage"] = tuple(data["usage"])
    return kind(**data)


def split_words(text: str) -> list[str]:
    words = re.findall(r"\S+\s*|\s+", text)
    return ["".join(words[i:i + 2]) for i in range(0, len(words), 2)] or [""]


def split_in(text: str, parts: int) -> list[str]:
    size = max(1, math.ceil(len(text) / parts))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content or [] if part.get("type") == "text")
    return ""
